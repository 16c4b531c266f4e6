//! The crate's one error type.
//!
//! Invariant: every variant carries what an operator or embedder needs to act on it — the
//! database, the key, the heights. Bad input and corrupt bytes are errors, never panics.

use std::path::PathBuf;

/// Why a stored record failed to decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CorruptReason {
    /// The value is shorter than its framing or its fields require.
    #[error("truncated: needed {needed} more bytes")]
    Truncated {
        /// How many more bytes the decoder needed.
        needed: usize,
    },
    /// The stored crc32 does not match the bytes.
    #[error("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        /// The checksum stored in the record.
        stored: u32,
        /// The checksum of the bytes as read.
        computed: u32,
    },
    /// The record was written by a format version this build does not read.
    #[error("unknown format version {0}")]
    UnknownVersion(u8),
    /// The record's kind tag is not the one stored under this key.
    #[error("record kind {found} where kind {expected} belongs")]
    WrongKind {
        /// The kind this key must hold.
        expected: u8,
        /// The kind found.
        found: u8,
    },
    /// Bytes were left over after the last field.
    #[error("{0} trailing bytes after the last field")]
    Trailing(usize),
    /// A field holds a value outside its domain.
    #[error("invalid field: {0}")]
    Invalid(&'static str),
}

/// A heights-and-record snapshot for handshake errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Heights {
    /// Height of the block store on disk.
    pub block_store_height: u64,
    /// Height of the state store on disk.
    pub state_height: u64,
    /// Height of the application on disk.
    pub app_height: u64,
}

impl std::fmt::Display for Heights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "block store {}, state {}, app {}",
            self.block_store_height, self.state_height, self.app_height
        )
    }
}

/// What kind of failure an [`Error`] is, for an embedder to match on without reading
/// messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The disk (or the quota) is full (`ENOSPC`, `EDQUOT` anywhere in the source chain).
    /// Nothing durable is lost; free space and restart: the handshake repairs the home.
    DiskFull,
    /// Another I/O or storage-engine failure.
    Io,
    /// A stored record or file failed its checks.
    Corrupt,
    /// The home is open elsewhere.
    Locked,
    /// The home or a record was written by an incompatible format version, or for another
    /// chain (genesis mismatch).
    Incompatible,
    /// The databases' heights (or an app hash) form a shape no repair covers, or a rollback
    /// was refused.
    Inconsistent,
    /// An earlier failed write poisoned the handle: restart.
    Poisoned,
    /// Bad input (a block, a part set, a commit, an API precondition); nothing was written.
    InvalidInput,
    /// A record the caller asked for is not stored.
    NotFound,
    /// Durable state was asked for before anything was durable.
    NotYetDurable,
    /// An embedder's trait implementation (an [`crate::App`], a held store) broke its
    /// documented contract. The node is poisoned and wrote nothing past the broken call:
    /// fix the implementation, then restart (the handshake checks the home).
    Contract,
    /// An operation on the home (a rollback) was interrupted and only its rerun can finish
    /// it: the home is refused until then. Nothing is lost; rerun the operation.
    Interrupted,
}

/// The first failure that poisoned a handle: its kind and its message. The
/// [`Error::Poisoned`] of every later call carries it as its `source`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PoisonCause {
    /// The kind of the first failure.
    pub kind: ErrorKind,
    /// Its message.
    pub message: String,
}

/// A boxed error kept as an [`Error`]'s source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Every error flushpoint returns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O error from the operating system or the storage engine.
    #[error("database {db}: {op} failed: {message}")]
    Storage {
        /// The database involved.
        db: String,
        /// What was being done.
        op: &'static str,
        /// The engine's message (with the path, where one was involved).
        message: String,
        /// The engine's or the operating system's error.
        #[source]
        source: Option<BoxError>,
    },
    /// An earlier write or fsync failed; nothing more is accepted until restart.
    #[error(
        "database {db} is poisoned by an earlier failed write ({cause}); its durable content is unknown: restart the node so the handshake can check and repair it"
    )]
    Poisoned {
        /// The database involved.
        db: String,
        /// The first failure.
        #[source]
        cause: PoisonCause,
    },
    /// A stored record failed to decode. Shown as "database D: corrupt record at height H,
    /// key K: reason", the height only when known and the key only when not empty: as
    /// quoted text when it is printable ASCII (a file name, a meta key), else as `0x` hex.
    #[error("database {db}: corrupt record{}: {reason}", record_place(key, *height))]
    Corrupt {
        /// The database involved.
        db: String,
        /// The key whose value is corrupt.
        key: Vec<u8>,
        /// The height the key names, if any.
        height: Option<u64>,
        /// What is wrong with it.
        reason: CorruptReason,
    },
    /// A block was offered at the wrong height.
    #[error("block store: cannot save block {got}: the next height is {expected}")]
    NonContiguous {
        /// The only height the store accepts now.
        expected: u64,
        /// The height offered.
        got: u64,
    },
    /// A block's part set is missing parts.
    #[error("block store: block {height} has {have} of {total} parts")]
    IncompletePartSet {
        /// The block's height.
        height: u64,
        /// Parts present.
        have: u32,
        /// Parts required.
        total: u32,
    },
    /// A block was offered with a part set that is not its own encoding.
    #[error(
        "block store: block {height}'s part set is not the block's own encoding (first difference at byte {offset} of {block_size}); nothing was written"
    )]
    PartSetMismatch {
        /// The block's height.
        height: u64,
        /// The first byte offset where the parts and the block's encoding differ (the
        /// shorter length when one is a prefix of the other).
        offset: u64,
        /// The length of the block's encoding.
        block_size: u64,
    },
    /// Input that breaks an API precondition.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// A record the caller asked for is not stored.
    #[error("database {db}: {what} not found")]
    NotFound {
        /// The database involved.
        db: String,
        /// What was missing.
        what: String,
    },
    /// The home directory is locked by another open.
    #[error(
        "home {path} is already open (locked by another flushpoint process or handle); stop it first"
    )]
    HomeLocked {
        /// The home directory.
        path: PathBuf,
    },
    /// The home directory was written by an incompatible format version.
    #[error(
        "home {path}: its FORMAT records format version {found}; this build reads version {expected}: use a matching flushpoint build or a new home"
    )]
    HomeVersion {
        /// The home directory.
        path: PathBuf,
        /// The version found.
        found: u32,
        /// The version this build reads.
        expected: u32,
    },
    /// The home was created on another storage engine than the one asked for (ADR 0012):
    /// refused before anything was written.
    #[error(
        "home {path} was created on the {recorded} engine, not {requested}: a home keeps the engine it was created with (open it on {recorded}, or use a new home)"
    )]
    HomeEngine {
        /// The home directory.
        path: PathBuf,
        /// The engine the home's `FORMAT` records.
        recorded: crate::engine::HomeEngine,
        /// The engine asked for.
        requested: crate::engine::HomeEngine,
    },
    /// The home's files do not match its `FORMAT` or each other (a `FORMAT` lost, cut,
    /// unreadable or naming another engine's files; a database file lost beside the
    /// others): refused before anything was written, so no data is taken for a new home.
    #[error(
        "home {path}: {problem}; nothing was written: restore the file named (or the whole home) from a backup"
    )]
    HomeDamaged {
        /// The home directory.
        path: PathBuf,
        /// What does not match: the files found and what `FORMAT` records.
        problem: String,
    },
    /// A filesystem error on the home directory.
    #[error("home {path}: {op}: {source}")]
    Home {
        /// The path involved.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The databases' heights form a shape no repair covers.
    #[error("handshake: {heights}, flush record {record}: {reason}; nothing was changed on disk")]
    Inconsistent {
        /// The heights found.
        heights: Heights,
        /// The flush record, rendered.
        record: String,
        /// Why the shape is refused.
        reason: String,
    },
    /// Replaying a block produced a different app hash than the chain recorded.
    #[error("app hash mismatch at height {height}: chain has {expected}, app computed {got}")]
    AppHashMismatch {
        /// The height replayed.
        height: u64,
        /// The hash the chain recorded.
        expected: String,
        /// The hash the app computed.
        got: String,
    },
    /// A read that must come from durable state was asked before anything was durable.
    #[error("{what} is not available before the first flush point")]
    NotYetDurable {
        /// What was asked.
        what: &'static str,
    },
    /// A block does not follow the state it is applied to.
    #[error("block {height} does not follow the state: {reason}")]
    InvalidBlock {
        /// The block's height.
        height: u64,
        /// Which field disagrees.
        reason: String,
    },
    /// The home was created for another chain: its stored genesis hash differs.
    #[error(
        "the home was created with genesis {stored}, not the genesis given ({given}): it belongs to another chain; use a new home"
    )]
    GenesisMismatch {
        /// The genesis hash stored on the home's first open (hex).
        stored: String,
        /// The hash of the genesis given now (hex).
        given: String,
    },
    /// A rollback was refused.
    #[error("rollback refused: {0}")]
    Rollback(String),
    /// A load asked for a height the state store pruned.
    #[error(
        "database {db}: {what} of height {height} is pruned (the store keeps heights from {base} on)"
    )]
    Pruned {
        /// The database involved.
        db: String,
        /// What was asked for (`"results"`, `"validators"`, `"consensus params"`).
        what: &'static str,
        /// The height asked for.
        height: u64,
        /// The store's base: the lowest height it still answers for.
        base: u64,
    },
    /// A prune was asked with a retain height the store cannot take; nothing was written.
    #[error(
        "database {db}: cannot prune to retain height {retain_height}: it must be at least 1, at least the base {base} and at most the height {height}; nothing was written"
    )]
    InvalidRetainHeight {
        /// The database involved.
        db: String,
        /// The retain height asked for.
        retain_height: u64,
        /// The store's current base (0: nothing pruned yet).
        base: u64,
        /// The store's height: the block store's, or the saved state's.
        height: u64,
    },
    /// An embedder's trait implementation broke its documented contract: the node checked
    /// `what` and found `found` where the contract requires `expected`. Returned instead of
    /// a panic; the node is poisoned and writes nothing past the broken call.
    #[error(
        "contract broken: {what}: expected {expected}, found {found}; nothing past it was written"
    )]
    Contract {
        /// The checked quantity, naming the trait method, e.g. "height returned by
        /// App::commit".
        what: &'static str,
        /// What the contract requires (a height or a byte count).
        expected: u64,
        /// What the implementation reported.
        found: u64,
    },
    /// A rollback was refused before anything was written: the home cannot be rolled back
    /// to `to` as it stands.
    #[error("cannot roll back to {to} ({heights}): {reason}; nothing was changed")]
    RollbackRefused {
        /// The height asked for.
        to: u64,
        /// The heights found on disk.
        heights: Heights,
        /// Why it was refused.
        reason: RollbackRefusal,
    },
    /// The app cannot roll back to `to`: it keeps no undo history (`lowest` is `None`) or
    /// its history reaches down to `lowest` only. Nothing was written.
    #[error(
        "cannot roll back to {to}: the app is at {app_height} and {}",
        match lowest {
            Some(l) => format!("can roll back to {l} at the lowest (its undo log keeps a bounded window of blocks)"),
            None => "cannot roll back (it keeps no undo log)".to_string(),
        }
    )]
    AppCannotRollBack {
        /// The height asked for.
        to: u64,
        /// The app's durable height.
        app_height: u64,
        /// The lowest height the app can roll back to, if it can roll back at all.
        lowest: Option<u64>,
    },
    /// A home holds an interrupted rollback whose remaining steps need the app (which
    /// `Home::open` does not have): the home is refused, nothing was changed; rerun the
    /// rollback to `to` to finish it.
    #[error(
        "home {path}: a rollback to height {to} was interrupted in its {step} step (block store {block_store_height}, state {state_height}); nothing was changed: rerun the rollback to {to} to finish it"
    )]
    RollbackInterrupted {
        /// The home directory.
        path: PathBuf,
        /// The height the interrupted rollback targets.
        to: u64,
        /// The block store's height found.
        block_store_height: u64,
        /// The state's height found.
        state_height: u64,
        /// The step the rollback was in when it was interrupted.
        step: &'static str,
    },
    /// A database file is damaged in a way redb does not check for: redb panicked inside
    /// `op` on it. The panic is caught at the crate's one boundary with redb
    /// (`src/db/redb_guard.rs`); the handle makes no further call into redb and its file
    /// takes no further write (its writes are fenced), so the file is as the damage left it.
    #[error(
        "database {db}: file {} is damaged: {op} failed inside redb ({cause}); this handle refuses every later call and writes nothing more to the file: restore the home from a backup, or move it aside and sync the node again from its peers",
        shown_path(path.as_deref())
    )]
    CorruptFile {
        /// The database involved.
        db: String,
        /// The damaged file (`None` for a database opened over a backend without a path).
        path: Option<PathBuf>,
        /// What was being done when redb panicked.
        op: &'static str,
        /// redb's panic message.
        #[source]
        cause: EnginePanic,
    },
    /// A journal segment file disagrees with what the journal's index records or with what
    /// the journal writes: missing, shorter than the units the index says were applied in
    /// it, or longer than any segment the journal writes. Nothing was written.
    #[error(
        "journal segment {segment}: {problem}; the journal is damaged and is not opened (nothing was written): restore the home from a backup, or sync a new home"
    )]
    JournalSegment {
        /// The segment file.
        segment: PathBuf,
        /// What is wrong with it: the offsets and seqs involved.
        problem: String,
    },
    /// The journal directory is open in another engine (another home whose `journal/` is
    /// the same directory, or a second open in this process).
    #[error(
        "journal directory {dir} is already open (locked by another flushpoint process or handle); stop it first"
    )]
    JournalLocked {
        /// The journal directory.
        dir: PathBuf,
    },
}

/// redb's panic, caught: its message (`Error::CorruptFile`'s source).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("redb panicked: {message}")]
pub struct EnginePanic {
    /// The panic's message (its payload when a string, else a placeholder).
    pub message: String,
}

/// A file's path for a message, or what stands for a backend without one.
fn shown_path(path: Option<&std::path::Path>) -> String {
    match path {
        Some(p) => p.display().to_string(),
        None => "(a redb backend without a path)".to_string(),
    }
}

/// Why [`Error::RollbackRefused`] refused a rollback.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RollbackRefusal {
    /// The home has no saved state: there is nothing to roll back.
    #[error("the home has no saved state")]
    NoState,
    /// A crash inside a flush point left a shape the handshake repairs by rolling forward:
    /// open the node once (or repair) first.
    #[error(
        "a crash inside a flush point left it (flush record {record}): the handshake must roll it forward first"
    )]
    NeedsRepair {
        /// The flush record, rendered.
        record: String,
    },
    /// The heights form a shape the handshake refuses.
    #[error("{0}")]
    Unrepairable(&'static str),
    /// The block store's lowest block is above `to + 1` (pruned below).
    #[error("the block store's lowest block is {base} (pruned below)")]
    BelowBase {
        /// The block store's base.
        base: u64,
    },
    /// Another rollback, to `in_progress`, was interrupted: finish it first.
    #[error("an interrupted rollback to {in_progress} is in progress: finish it first")]
    OtherInProgress {
        /// The interrupted rollback's target.
        in_progress: u64,
    },
    /// The state at `to` cannot be rebuilt from the stored history and blocks.
    #[error("the state at the target cannot be rebuilt: {0}")]
    StateRebuild(String),
}

impl Error {
    /// Builds a storage error that keeps `err` as its source (for [`crate::Db`]
    /// implementations outside the crate too: its [`Error::kind`] is `DiskFull` when an
    /// `ENOSPC`/`EDQUOT` I/O error is in the chain, `Corrupt` when redb found the file's
    /// bytes damaged, `Io` otherwise).
    pub fn storage(db: &str, op: &'static str, err: impl Into<BoxError>) -> Self {
        let source: BoxError = err.into();
        Error::Storage {
            db: db.to_string(),
            op,
            message: source.to_string(),
            source: Some(source),
        }
    }

    /// Builds a storage error from an I/O error on `path`, keeping the I/O error as source.
    pub(crate) fn io(
        db: &str,
        op: &'static str,
        path: &std::path::Path,
        err: std::io::Error,
    ) -> Self {
        Error::Storage {
            db: db.to_string(),
            op,
            message: format!("{}: {err}", path.display()),
            source: Some(Box::new(err)),
        }
    }

    /// The kind of failure, for matching without reading the message.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Storage { source, .. } => {
                let io = source.as_deref().and_then(|e| io_error_in(e));
                if source.as_deref().is_some_and(|e| already_open(e)) {
                    // redb's own file lock: the database is open elsewhere (a home opened
                    // around its lock, or a database file opened directly).
                    ErrorKind::Locked
                } else if io.is_some_and(is_disk_full) {
                    ErrorKind::DiskFull
                } else if source.as_deref().is_some_and(|e| redb_file_damaged(e)) {
                    ErrorKind::Corrupt
                } else {
                    ErrorKind::Io
                }
            }
            Error::Home { source, .. } => {
                if is_disk_full(source) {
                    ErrorKind::DiskFull
                } else {
                    ErrorKind::Io
                }
            }
            Error::Poisoned { .. } => ErrorKind::Poisoned,
            Error::Corrupt { .. }
            | Error::CorruptFile { .. }
            | Error::HomeDamaged { .. }
            | Error::JournalSegment { .. } => ErrorKind::Corrupt,
            Error::NonContiguous { .. }
            | Error::IncompletePartSet { .. }
            | Error::PartSetMismatch { .. }
            | Error::InvalidInput(_)
            | Error::InvalidBlock { .. }
            | Error::InvalidRetainHeight { .. } => ErrorKind::InvalidInput,
            Error::NotFound { .. } | Error::Pruned { .. } => ErrorKind::NotFound,
            Error::HomeLocked { .. } | Error::JournalLocked { .. } => ErrorKind::Locked,
            Error::HomeVersion { .. }
            | Error::HomeEngine { .. }
            | Error::GenesisMismatch { .. } => ErrorKind::Incompatible,
            Error::Inconsistent { .. }
            | Error::AppHashMismatch { .. }
            | Error::Rollback(_)
            | Error::AppCannotRollBack { .. } => ErrorKind::Inconsistent,
            Error::RollbackRefused { reason, .. } => match reason {
                RollbackRefusal::OtherInProgress { .. } => ErrorKind::Interrupted,
                _ => ErrorKind::Inconsistent,
            },
            Error::RollbackInterrupted { .. } => ErrorKind::Interrupted,
            Error::NotYetDurable { .. } => ErrorKind::NotYetDurable,
            Error::Contract { .. } => ErrorKind::Contract,
        }
    }
}

fn is_disk_full(e: &std::io::Error) -> bool {
    // ENOSPC and EDQUOT on Linux (28 and 122); `StorageFull` covers what std maps.
    e.kind() == std::io::ErrorKind::StorageFull || matches!(e.raw_os_error(), Some(28) | Some(122))
}

/// True when `e`'s source chain holds redb's "database already open" (its file lock).
fn already_open(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(e) = cur {
        if matches!(
            e.downcast_ref::<redb::DatabaseError>(),
            Some(redb::DatabaseError::DatabaseAlreadyOpen)
        ) {
            return true;
        }
        cur = e.source();
    }
    false
}

/// The first I/O error in `e`'s source chain, looking inside redb's error types (which
/// carry the I/O error as a variant rather than as a source).
fn io_error_in<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a std::io::Error> {
    let mut cur: Option<&'a (dyn std::error::Error + 'static)> = Some(e);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        let storage = e
            .downcast_ref::<redb::StorageError>()
            .or_else(|| match e.downcast_ref::<redb::CommitError>() {
                Some(redb::CommitError::Storage(s)) => Some(s),
                _ => None,
            })
            .or_else(|| match e.downcast_ref::<redb::TransactionError>() {
                Some(redb::TransactionError::Storage(s)) => Some(s),
                _ => None,
            })
            .or_else(|| match e.downcast_ref::<redb::TableError>() {
                Some(redb::TableError::Storage(s)) => Some(s),
                _ => None,
            })
            .or_else(|| match e.downcast_ref::<redb::DatabaseError>() {
                Some(redb::DatabaseError::Storage(s)) => Some(s),
                _ => None,
            });
        if let Some(redb::StorageError::Io(io)) = storage {
            return Some(io);
        }
        cur = e.source();
    }
    None
}

/// True when `e`'s source chain holds redb's verdict on the file's bytes: `Corrupted`, or
/// the `InvalidData` I/O error redb reports for a file that is not a redb database (magic
/// number mismatch; an OS error, with its errno, is the device's failure, not the file's).
fn redb_file_damaged(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(e) = cur {
        let storage = e
            .downcast_ref::<redb::StorageError>()
            .or_else(|| match e.downcast_ref::<redb::CommitError>() {
                Some(redb::CommitError::Storage(s)) => Some(s),
                _ => None,
            })
            .or_else(|| match e.downcast_ref::<redb::TransactionError>() {
                Some(redb::TransactionError::Storage(s)) => Some(s),
                _ => None,
            })
            .or_else(|| match e.downcast_ref::<redb::TableError>() {
                Some(redb::TableError::Storage(s)) => Some(s),
                _ => None,
            })
            .or_else(|| match e.downcast_ref::<redb::DatabaseError>() {
                Some(redb::DatabaseError::Storage(s)) => Some(s),
                _ => None,
            });
        match storage {
            Some(redb::StorageError::Corrupted(_)) => return true,
            Some(redb::StorageError::Io(io)) => {
                return io.kind() == std::io::ErrorKind::InvalidData && io.raw_os_error().is_none();
            }
            _ => {}
        }
        if e.downcast_ref::<redb::Error>()
            .is_some_and(|r| matches!(r, redb::Error::Corrupted(_)))
        {
            return true;
        }
        cur = e.source();
    }
    false
}

/// Where a corrupt record is, for [`Error::Corrupt`]'s message: " at height H, key K",
/// either part left out when unknown (`None`, an empty key).
fn record_place(key: &[u8], height: Option<u64>) -> String {
    let key = if key.is_empty() {
        None
    } else if key.iter().all(|b| (0x20..=0x7e).contains(b)) {
        // Printable ASCII: valid UTF-8, shown quoted (and `"`, `\` escaped).
        Some(format!("{:?}", String::from_utf8_lossy(key)))
    } else {
        Some(format!("0x{}", hex(key)))
    };
    match (height, key) {
        (Some(h), Some(k)) => format!(" at height {h}, key {k}"),
        (Some(h), None) => format!(" at height {h}"),
        (None, Some(k)) => format!(" at key {k}"),
        (None, None) => String::new(),
    }
}

/// Result with the crate's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Lower-case hex of bytes, for messages.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}
