//! Flags and defaults several commands share: where the home is, its engine, the chain's
//! block profile.
//!
//! Invariant: imports nothing from the tool's other modules; a command's own flags live in
//! its module.

use std::path::{Path, PathBuf};

use clap::ValueEnum;

/// The home used when neither `--home` nor `FLUSHPOINT_HOME` is given.
pub const DEFAULT_HOME: &str = "./flushpoint-home";
/// Environment variable naming the home directory.
pub const HOME_ENV: &str = "FLUSHPOINT_HOME";

/// The home directory: `--home`, else `FLUSHPOINT_HOME`, else [`DEFAULT_HOME`].
pub fn resolve_home(arg: Option<&Path>) -> PathBuf {
    if let Some(p) = arg {
        return p.to_path_buf();
    }
    match std::env::var_os(HOME_ENV) {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(DEFAULT_HOME),
    }
}

/// Storage engine of a new home (mirrors `flushpoint::HomeEngine`; ADR 0012).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    /// Three redb files.
    Redb,
    /// One journal: the three databases as keyspaces of one journal engine (ADR 0008; the
    /// default for a new home).
    Journal,
}

impl EngineArg {
    /// The library's engine.
    pub fn engine(self) -> flushpoint::HomeEngine {
        match self {
            EngineArg::Redb => flushpoint::HomeEngine::Redb,
            EngineArg::Journal => flushpoint::HomeEngine::Journal,
        }
    }
}

/// Block size profile (mirrors `flushpoint::demo::Profile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProfileArg {
    /// ≈ 4 KiB of transactions per block.
    Light,
    /// ≈ 1 MiB per block in 64 KiB parts.
    Heavy,
    /// Light, with one heavy block in ten.
    Mixed,
    /// 64 account updates per block, each reading a value (what `--prefetch on` warms).
    Accounts,
}

impl ProfileArg {
    /// The library's profile.
    pub fn profile(self) -> flushpoint::demo::Profile {
        match self {
            ProfileArg::Light => flushpoint::demo::Profile::Light,
            ProfileArg::Heavy => flushpoint::demo::Profile::Heavy,
            ProfileArg::Mixed => flushpoint::demo::Profile::Mixed,
            ProfileArg::Accounts => flushpoint::demo::Profile::Accounts,
        }
    }
    /// The flag's value, as the tool prints it.
    pub fn name(self) -> &'static str {
        match self {
            ProfileArg::Light => "light",
            ProfileArg::Heavy => "heavy",
            ProfileArg::Mixed => "mixed",
            ProfileArg::Accounts => "accounts",
        }
    }
}
