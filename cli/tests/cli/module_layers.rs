//! The tool's modules point one way: each module of `cli/src/cli/` imports only from modules
//! in lower layers (the order `cli/src/cli/mod.rs` states), and a folder's files only from
//! lower files of the same folder. A new module must be given its layer here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Layer of each top-level module (`mod` is `cli/src/cli/mod.rs`, the dispatch on top).
const TOP: [(&str, u32); 12] = [
    ("error", 0),
    ("out", 1),
    ("flags", 2),
    ("dbwrap", 2),
    ("heights", 2),
    ("handshake", 2),
    ("sync", 3),
    ("crash", 4),
    ("inspect", 4),
    ("rollback", 4),
    ("verify", 4),
    ("mod", 5),
];

/// Layer of each file inside a folder module (`mod` is the folder's `mod.rs`).
const INNER: [(&str, &str, u32); 9] = [
    ("sync", "args", 0),
    ("sync", "meters", 0),
    ("sync", "progress", 0),
    ("sync", "summary", 1),
    ("sync", "mod", 2),
    ("crash", "plan", 0),
    ("crash", "save_dir", 0),
    ("crash", "child", 1),
    ("crash", "mod", 2),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read cli/src/cli") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module names that follow each occurrence of `prefix` in `text` (`super::*` and
/// macro paths excluded).
fn targets_after<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.match_indices(prefix)
        .filter(|(i, _)| !text[..*i].ends_with('$'))
        .filter_map(|(i, _)| {
            let rest = &text[i + prefix.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            (end > 0).then(|| &rest[..end])
        })
        .collect()
}

#[test]
fn the_tools_modules_import_only_from_lower_layers() {
    let top: BTreeMap<&str, u32> = TOP.into_iter().collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut checked = 0;
    for f in files {
        let rel = f.strip_prefix(&root).expect("under src/cli");
        let parts: Vec<String> = rel
            .with_extension("")
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        let text = std::fs::read_to_string(&f).expect("read module");
        // Comments may name any module.
        let code: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let (folder, file) = match parts.as_slice() {
            [file] => (None, file.as_str()),
            [folder, file] => (Some(folder.as_str()), file.as_str()),
            _ => panic!("{}: nested deeper than one folder", rel.display()),
        };
        let top_name = folder.unwrap_or(file);
        let layer = *top
            .get(top_name)
            .unwrap_or_else(|| panic!("{}: give the module a layer in TOP", rel.display()));
        // Imports of top-level modules: `crate::cli::x` anywhere, `super::x` from a top-level
        // file or a folder's `mod.rs`.
        let mut top_imports = targets_after(&code, "crate::cli::");
        let super_is_top = folder.is_none() || file == "mod";
        if super_is_top {
            top_imports.extend(targets_after(&code, "super::"));
        }
        for t in top_imports {
            let Some(&to) = top.get(t) else { continue };
            assert!(
                to < layer || (folder.is_some() && t == top_name),
                "{} (layer {layer}) imports `{t}` (layer {to}): an upward or sideways import",
                rel.display()
            );
        }
        // Imports inside a folder: `self::x` from its `mod.rs`, `super::x` from its files.
        if let Some(folder) = folder {
            let inner: BTreeMap<&str, u32> = INNER
                .iter()
                .filter(|(d, _, _)| *d == folder)
                .map(|(_, f, l)| (*f, *l))
                .collect();
            let here = *inner
                .get(file)
                .unwrap_or_else(|| panic!("{}: give the file a layer in INNER", rel.display()));
            let inner_imports = if file == "mod" {
                targets_after(&code, "self::")
            } else {
                targets_after(&code, "super::")
            };
            for t in inner_imports {
                let Some(&to) = inner.get(t) else { continue };
                assert!(
                    to < here,
                    "{} (layer {here} in {folder}/) imports `{t}` (layer {to}): an upward or sideways import",
                    rel.display()
                );
            }
        }
        checked += 1;
    }
    assert!(
        checked >= TOP.len(),
        "every module file was read ({checked})"
    );
}
