//! The outcome checker every benchmark calls before it times a path: a lookup or a run is
//! timed only after its answer matched the oracle's, so a broken path cannot look fast.
//!
//! Invariant: `check` compares whole outcomes (heights, hashes, bytes, found or not); it
//! never accepts a near miss.

/// What a path produced (or what the oracle says it must produce).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing found.
    Missing,
    /// A block (or its meta): its height and hash.
    Block(u64, Vec<u8>),
    /// A hash.
    Hash(Vec<u8>),
    /// A value's bytes.
    Value(Vec<u8>),
    /// Heights (e.g. block store, state, app).
    Heights(Vec<u64>),
}

/// A path gave the wrong answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckError {
    /// The path checked.
    pub what: String,
    /// What it produced.
    pub got: String,
    /// What the oracle expected.
    pub want: String,
}

impl std::fmt::Display for CheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "outcome check failed for {}: got {}, want {}",
            self.what, self.got, self.want
        )
    }
}

impl std::error::Error for CheckError {}

fn short(o: &Outcome) -> String {
    let hex = |b: &[u8]| {
        b.iter()
            .take(8)
            .map(|x| format!("{x:02x}"))
            .collect::<String>()
    };
    match o {
        Outcome::Missing => "missing".into(),
        Outcome::Block(h, hash) => format!("block {h} {}…", hex(hash)),
        Outcome::Hash(h) => format!("hash {}…", hex(h)),
        Outcome::Value(v) => format!("{} B {}…", v.len(), hex(v)),
        Outcome::Heights(h) => format!("heights {h:?}"),
    }
}

/// `Ok` when `got` is exactly `want`.
pub fn check(what: &str, got: &Outcome, want: &Outcome) -> Result<(), CheckError> {
    if got == want {
        Ok(())
    } else {
        Err(CheckError {
            what: what.to_string(),
            got: short(got),
            want: short(want),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_accepts_the_right_answer() {
        let b = Outcome::Block(7, vec![1; 32]);
        assert!(check("block", &b, &b.clone()).is_ok());
        assert!(check("miss", &Outcome::Missing, &Outcome::Missing).is_ok());
    }

    #[test]
    fn check_rejects_a_wrong_hash_height_value_or_a_found_miss() {
        let want = Outcome::Block(7, vec![1; 32]);
        let mut wrong_hash = vec![1; 32];
        wrong_hash[31] = 2;
        let e = check("block by hash", &Outcome::Block(7, wrong_hash), &want).unwrap_err();
        assert!(e.to_string().contains("block by hash"), "{e}");
        assert!(check("block", &Outcome::Block(8, vec![1; 32]), &want).is_err());
        assert!(check("block", &Outcome::Missing, &want).is_err());
        assert!(check("miss", &want, &Outcome::Missing).is_err());
        assert!(
            check(
                "value",
                &Outcome::Value(vec![1, 2]),
                &Outcome::Value(vec![1, 3])
            )
            .is_err()
        );
        assert!(
            check(
                "heights",
                &Outcome::Heights(vec![5, 5, 4]),
                &Outcome::Heights(vec![5; 3])
            )
            .is_err()
        );
    }
}
