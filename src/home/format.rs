//! A home's `FORMAT` file: its text, its parsing, and which engines' files a home holds.

use std::path::Path;

use super::{HOME_FORMAT_VERSION, HomeEngine, JOURNAL_DIR, REDB_FILES, home_err};
use crate::error::{Error, Result};
use crate::fs::FileSystem;

/// The longest `FORMAT` read, in bytes. Why: a FORMAT is a few short lines (under 100
/// bytes); a longer file is damaged, and reading it whole would allocate by its length.
pub(super) const FORMAT_BYTES_MAX: u64 = 4096;
pub(super) const FORMAT_PREFIX: &str = "flushpoint home format ";
pub(super) const FORMAT_ENGINE_PREFIX: &str = "engine ";
/// The third line of a journal home created since ADR 0013: its block store keeps block
/// parts in the journal, the index pointing at them. Why a line: a build from before it
/// would trim the segments holding the parts and read the pointers as blocks; it refuses
/// the line ("an unexpected line") and so never opens such a home. A journal home without
/// it keeps its parts in the index.
pub(super) const FORMAT_PARTS_LINE: &str = "parts journal";
/// The line of a journal home whose app keyspace is indexed by sorted runs (ADR 0014),
/// after the engine line (and the parts line, when present). Why a line: a build from
/// before it would find no `app` table in the index and take the app's state for empty; it
/// refuses the line ("an unexpected line"). Written at creation when
/// [`HomeOptions::app_index`] asks for runs.
pub(super) const FORMAT_APP_RUNS_LINE: &str = "app runs";
/// The line of a journal home whose app keyspace, indexed by runs, keeps its values of
/// [`SEPARATE_VALUES_FROM_BYTES`] or more in the journal, its runs pointing at them (ADR
/// 0016), after the `app runs` line. Why a line: a build from before it would read the
/// pointers as the app's values, and trim the segments they lead into; it refuses the line
/// ("an unexpected line"). Written with `app runs` when a journal home is created.
pub(super) const FORMAT_APP_VALUES_LINE: &str = "app values journal";

/// What a home's `FORMAT` records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Recorded {
    pub(super) engine: HomeEngine,
    /// The block store keeps its parts in the journal (ADR 0013; journal homes only).
    pub(super) parts_in_journal: bool,
    /// The app keyspace is indexed by sorted runs (ADR 0014; journal homes only).
    pub(super) app_runs: bool,
    /// The app keyspace's runs point at its large values in the journal (ADR 0016; with
    /// `app_runs` only).
    pub(super) app_values_in_journal: bool,
}

pub(super) fn not_a_home(path: &Path, op: &'static str) -> Error {
    Error::Home {
        path: path.to_path_buf(),
        op,
        source: std::io::Error::from(std::io::ErrorKind::InvalidData),
    }
}

/// The bytes of a new home's `FORMAT` on `engine`: a redb home's are exactly those of
/// format 2 before engines existed, so older builds open it too; a journal home's name
/// its engine and that its parts are kept in the journal.
pub(crate) fn format_text(engine: HomeEngine, app_runs: bool) -> String {
    match engine {
        HomeEngine::Redb => format!("{FORMAT_PREFIX}{HOME_FORMAT_VERSION}\n"),
        e => {
            let mut text = format!(
                "{FORMAT_PREFIX}{HOME_FORMAT_VERSION}\n{FORMAT_ENGINE_PREFIX}{e}\n{FORMAT_PARTS_LINE}\n"
            );
            if app_runs {
                text.push_str(FORMAT_APP_RUNS_LINE);
                text.push('\n');
                text.push_str(FORMAT_APP_VALUES_LINE);
                text.push('\n');
            }
            text
        }
    }
}

/// Parses a `FORMAT` file: the version line, then at most one `engine <name>` line (none:
/// redb), then, on a journal home, at most one `parts journal` line.
pub(super) fn parse_format(path: &Path, text: &str) -> Result<Recorded> {
    let mut lines = text.lines();
    let found = lines
        .next()
        .and_then(|l| l.trim().strip_prefix(FORMAT_PREFIX))
        .and_then(|v| v.parse::<u32>().ok())
        .ok_or_else(|| not_a_home(path, "read FORMAT (not a flushpoint home)"))?;
    if found != HOME_FORMAT_VERSION {
        return Err(Error::HomeVersion {
            path: path.to_path_buf(),
            found,
            expected: HOME_FORMAT_VERSION,
        });
    }
    let mut engine = None;
    let mut parts_in_journal = false;
    let mut app_runs = false;
    let mut app_values_in_journal = false;
    for line in lines.map(str::trim).filter(|l| !l.is_empty()) {
        if line == FORMAT_PARTS_LINE
            && engine == Some(HomeEngine::Journal)
            && !parts_in_journal
            && !app_runs
        {
            parts_in_journal = true;
            continue;
        }
        if line == FORMAT_APP_RUNS_LINE && engine == Some(HomeEngine::Journal) && !app_runs {
            app_runs = true;
            continue;
        }
        if line == FORMAT_APP_VALUES_LINE && app_runs && !app_values_in_journal {
            app_values_in_journal = true;
            continue;
        }
        let name = line
            .strip_prefix(FORMAT_ENGINE_PREFIX)
            .filter(|_| engine.is_none() && !parts_in_journal && !app_runs)
            .ok_or_else(|| not_a_home(path, "read FORMAT (an unexpected line)"))?;
        engine = Some(HomeEngine::from_name(name.trim()).ok_or_else(|| {
            not_a_home(
                path,
                "read FORMAT (an engine this build does not know; a newer flushpoint wrote it)",
            )
        })?);
    }
    Ok(Recorded {
        engine: engine.unwrap_or(HomeEngine::Redb),
        parts_in_journal,
        app_runs,
        app_values_in_journal,
    })
}

/// Which engines' database files a home directory holds.
pub(super) struct EngineFiles {
    /// The redb databases present, by file name.
    pub(super) redb: Vec<&'static str>,
    /// Whether the journal's directory is present.
    pub(super) journal: bool,
}

impl EngineFiles {
    pub(super) fn find(fs: &dyn FileSystem, path: &Path) -> Result<EngineFiles> {
        let mut redb = Vec::new();
        for file in REDB_FILES {
            if fs
                .exists(&path.join(file))
                .map_err(home_err(path, "stat a database file"))?
            {
                redb.push(file);
            }
        }
        let journal = fs
            .exists(&path.join(JOURNAL_DIR))
            .map_err(home_err(path, "stat the journal directory"))?;
        Ok(EngineFiles { redb, journal })
    }

    /// The files of an engine other than `engine`, described, if any are present.
    pub(super) fn other_than(&self, engine: HomeEngine) -> Option<String> {
        match engine {
            HomeEngine::Redb if self.journal => Some(format!("{JOURNAL_DIR}/")),
            HomeEngine::Journal if !self.redb.is_empty() => Some(self.redb.join(", ")),
            _ => None,
        }
    }

    /// Every database file present, described, if any is.
    pub(super) fn any(&self) -> Option<String> {
        let mut all: Vec<String> = self.redb.iter().map(|f| f.to_string()).collect();
        if self.journal {
            all.push(format!("{JOURNAL_DIR}/"));
        }
        (!all.is_empty()).then(|| all.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_text_parses_back_to_its_engine_and_redb_keeps_the_old_bytes() {
        let p = Path::new("/h");
        assert_eq!(
            format_text(HomeEngine::Redb, false),
            format!("flushpoint home format {HOME_FORMAT_VERSION}\n")
        );
        for e in [HomeEngine::Redb, HomeEngine::Journal] {
            let r = parse_format(p, &format_text(e, false)).unwrap();
            assert_eq!(r.engine, e);
            // A new journal home keeps its parts in the journal (ADR 0013).
            assert_eq!(r.parts_in_journal, e == HomeEngine::Journal);
            assert!(!r.app_runs);
            assert_eq!(HomeEngine::from_name(e.name()), Some(e));
        }
        // A journal home whose app is indexed by runs (ADR 0014).
        assert_eq!(
            format_text(HomeEngine::Journal, true),
            "flushpoint home format 2\nengine journal\nparts journal\napp runs\napp values journal\n"
        );
        assert_eq!(
            parse_format(p, &format_text(HomeEngine::Journal, true)).unwrap(),
            Recorded {
                engine: HomeEngine::Journal,
                parts_in_journal: true,
                app_runs: true,
                app_values_in_journal: true,
            }
        );
        // A home from before ADR 0016: the app's runs hold its values.
        assert_eq!(
            parse_format(
                p,
                "flushpoint home format 2\nengine journal\nparts journal\napp runs\n"
            )
            .unwrap(),
            Recorded {
                engine: HomeEngine::Journal,
                parts_in_journal: true,
                app_runs: true,
                app_values_in_journal: false,
            }
        );
        // A journal home from before ADR 0013: parts in the index.
        assert_eq!(
            parse_format(p, "flushpoint home format 2\nengine journal\n").unwrap(),
            Recorded {
                engine: HomeEngine::Journal,
                parts_in_journal: false,
                app_runs: false,
                app_values_in_journal: false,
            }
        );
    }

    #[test]
    fn format_parser_refuses_unknown_engines_extra_lines_and_other_versions() {
        let p = Path::new("/h");
        for bad in [
            "flushpoint home format 2\nengine rocks\n",
            "flushpoint home format 2\nengine journal\nengine redb\n",
            "flushpoint home format 2\nparts journal\n",
            "flushpoint home format 2\nengine redb\nparts journal\n",
            "flushpoint home format 2\nparts journal\nengine journal\n",
            "flushpoint home format 2\nengine journal\nparts journal\nparts journal\n",
            "flushpoint home format 2\nengine journal\nparts index\n",
            "flushpoint home format 2\napp runs\n",
            "flushpoint home format 2\nengine redb\napp runs\n",
            "flushpoint home format 2\nengine journal\napp runs\napp runs\n",
            "flushpoint home format 2\nengine journal\napp runs\nparts journal\n",
            "flushpoint home format 2\napp runs\nengine journal\n",
            "flushpoint home format 2\nengine journal\napp values journal\n",
            "flushpoint home format 2\nengine journal\napp values journal\napp runs\n",
            "flushpoint home format 2\nengine journal\napp runs\napp values journal\napp values journal\n",
            "flushpoint home format 2\nengine journal\napp runs\napp values journal\napp runs\n",
            "flushpoint home format 2\nsomething\n",
            "flushpoint home format\n",
            "",
        ] {
            assert!(
                matches!(parse_format(p, bad), Err(Error::Home { .. })),
                "{bad:?} accepted"
            );
        }
        assert!(matches!(
            parse_format(p, "flushpoint home format 3\nengine journal\n"),
            Err(Error::HomeVersion { found: 3, .. })
        ));
    }
}
