//! Which storage engine a home's databases live on: a name recorded in the home's `FORMAT`
//! file and carried by errors, hence at the bottom of the layers.
//!
//! Invariant: imports nothing of the crate.

/// The storage engine a home's databases live on, chosen when the home is created and
/// recorded in its `FORMAT` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum HomeEngine {
    /// Three redb files, `blockstore.redb`, `state.redb`, `app.redb`.
    Redb,
    /// One [`JournalEngine`](crate::journal::JournalEngine) in `journal/`, keyspaces
    /// `block store`, `state`, `app` (the default for a new home,
    /// [`HOME_ENGINE_DEFAULT`](crate::home::HOME_ENGINE_DEFAULT)).
    Journal,
}

impl HomeEngine {
    /// The engine that is not this one.
    pub(crate) fn other(self) -> HomeEngine {
        match self {
            HomeEngine::Redb => HomeEngine::Journal,
            HomeEngine::Journal => HomeEngine::Redb,
        }
    }

    /// The engine's name as `FORMAT` and the tool spell it: `redb` or `journal`.
    pub fn name(self) -> &'static str {
        match self {
            HomeEngine::Redb => "redb",
            HomeEngine::Journal => "journal",
        }
    }

    /// The engine named `name` (as [`HomeEngine::name`] spells it).
    pub fn from_name(name: &str) -> Option<HomeEngine> {
        match name {
            "redb" => Some(HomeEngine::Redb),
            "journal" => Some(HomeEngine::Journal),
            _ => None,
        }
    }
}

impl std::fmt::Display for HomeEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
