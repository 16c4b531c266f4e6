//! The library's layers point one way: each module imports only from the modules of its own
//! layer or of the layers below it, as the table in `src/lib.rs` ("Layers") states, and no
//! modules of one layer import each other in a circle. This test reads that table and every
//! file under `src/`, and fails naming each upward import and each circle (`crate::m` in
//! code, comments and `#[cfg(test)]` modules aside).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module → its layer (1 is the lowest), from the rows `//! | N | `a`, `b` | what |` of
/// the "Layers" table in the crate docs.
fn layers(lib_rs: &str) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for line in lib_rs.lines() {
        let Some(row) = line.strip_prefix("//! | ") else {
            continue;
        };
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let Ok(layer) = cells[0].parse::<u32>() else {
            continue;
        };
        for m in cells[1].split(',') {
            out.insert(m.trim().trim_matches('`').to_string(), layer);
        }
    }
    out
}

/// `src` without comments and without the items under `#[cfg(test)]`.
fn code_only(src: &str) -> String {
    let mut out = String::new();
    let mut lines = src.lines();
    while let Some(line) = lines.next() {
        let code = match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        if code.trim() == "#[cfg(test)]" {
            // Skip the next item: up to its matching close brace, or its `;`.
            let mut depth = 0i32;
            let mut opened = false;
            for l in lines.by_ref() {
                depth += l.matches('{').count() as i32 - l.matches('}').count() as i32;
                opened |= l.contains('{');
                if (opened && depth <= 0) || (!opened && l.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// The crate modules `code` names: `crate::m`, and `m` inside `use crate::{m, …}`.
fn imports(code: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for part in group[..end].split(',') {
                let m = ident(part.trim());
                if !m.is_empty() {
                    out.push(m);
                }
            }
        } else {
            out.push(ident(rest));
        }
    }
    out
}

/// The module a file under `src/` belongs to: `src/a.rs` and `src/a/…` are `a`.
fn module_of(rel: &Path) -> String {
    let first = rel.components().next().unwrap().as_os_str();
    Path::new(first)
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// The files that are test code: a module declared under `#[cfg(test)]` as `mod name;`
/// is the file `name.rs` beside its parent (or `name/mod.rs`), and everything under it.
fn test_only(files: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (rel, src) in files {
        let dir = match Path::new(rel).file_name().and_then(|f| f.to_str()) {
            Some("mod.rs" | "lib.rs") => Path::new(rel).parent().unwrap().to_path_buf(),
            _ => Path::new(rel).with_extension(""),
        };
        let mut lines = src.lines().map(str::trim);
        while let Some(line) = lines.next() {
            if line != "#[cfg(test)]" {
                continue;
            }
            let Some(next) = lines.next() else { break };
            let decl = next
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ");
            if let Some(name) = decl.strip_prefix("mod ").and_then(|d| d.strip_suffix(';')) {
                out.push(
                    dir.join(format!("{name}.rs"))
                        .to_string_lossy()
                        .into_owned(),
                );
                out.push(dir.join(name).to_string_lossy().into_owned() + "/");
            }
        }
    }
    out
}

/// Every upward import in `files` (path, source) against `layers`, every module that has no
/// layer, and every circle of imports between modules of one layer, as one line each. Test
/// code (see [`test_only`]) may import anything.
fn violations(layers: &BTreeMap<String, u32>, files: &[(String, String)]) -> Vec<String> {
    let tests = test_only(files);
    let mut out = Vec::new();
    // Imports between two modules of one layer: allowed, unless they close a circle.
    let mut sideways: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, src) in files {
        let from = module_of(Path::new(rel));
        if from == "lib"
            || tests
                .iter()
                .any(|t| rel == t || rel.starts_with(t.as_str()))
        {
            continue;
        }
        let Some(&own) = layers.get(&from) else {
            out.push(format!("{rel}: module `{from}` has no layer in the table"));
            continue;
        };
        for to in imports(&code_only(src)) {
            match layers.get(&to) {
                // A root item (`crate::Result`, `crate::hex`): lib.rs re-exports, not a layer.
                None => {}
                Some(&layer) if layer > own => out.push(format!(
                    "{rel}: `{from}` (layer {own}) imports `crate::{to}` (layer {layer})"
                )),
                Some(&layer) if layer == own && to != from => {
                    sideways.entry(from.clone()).or_default().insert(to);
                }
                Some(_) => {}
            }
        }
    }
    out.extend(circles(&sideways));
    out.sort();
    out.dedup();
    out
}

/// Each circle in `edges` (module → the modules it imports), as one line naming its modules
/// from the least, e.g. "circle: `a` → `b` → `a`".
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    // The shortest path from `from` to `to` along `edges`, `to` included.
    let path = |from: &str, to: &str| -> Option<Vec<String>> {
        let mut back: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([from.to_string()]);
        while let Some(m) = queue.pop_front() {
            for n in edges.get(&m).into_iter().flatten() {
                if back.contains_key(n) || n == from {
                    continue;
                }
                back.insert(n.clone(), m.clone());
                if n == to {
                    let mut p = vec![n.clone()];
                    while let Some(prev) = back.get(p.last().unwrap()) {
                        p.push(prev.clone());
                    }
                    p.reverse();
                    return Some(p);
                }
                queue.push_back(n.clone());
            }
        }
        None
    };
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (a, tos) in edges {
        for b in tos {
            let Some(rest) = path(b, a) else { continue };
            let mut members: Vec<String> = rest.clone();
            members.sort();
            if !seen.insert(members) {
                continue;
            }
            let names: Vec<String> = std::iter::once(a.clone())
                .chain(rest)
                .map(|m| format!("`{m}`"))
                .collect();
            out.push(format!("circle: {}", names.join(" → ")));
        }
    }
    out
}

fn source_files(dir: &Path, root: &Path, out: &mut Vec<(String, String)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            source_files(&p, root, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            out.push((rel, std::fs::read_to_string(&p).unwrap()));
        }
    }
}

#[test]
fn every_import_of_the_library_points_down_its_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let table = layers(&lib);
    assert!(
        table.len() >= 10,
        "the Layers table in src/lib.rs is missing: {table:?}"
    );
    let mut files = Vec::new();
    source_files(&src, &src, &mut files);
    let found = violations(&table, &files);
    assert!(
        found.is_empty(),
        "imports against the layers of src/lib.rs:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checker_finds_an_upward_import_and_a_circle_and_ignores_comments_and_tests() {
    let table =
        layers("//! | 1 | `low` | x |\n//! | 2 | `mid`, `peer` | y |\n//! | 3 | `high` | z |\n");
    assert_eq!(table.len(), 4);
    let file = |rel: &str, src: &str| (rel.to_string(), src.to_string());
    let files = [
        // Upward, in both spellings: found.
        file("mid/a.rs", "use crate::high::Thing;\n"),
        file("mid/b.rs", "use crate::{low::X, high::Y};\n"),
        file("low.rs", "fn f() { crate::mid::g() }\n"),
        // Down, sideways in a layer, in a comment, in a test module: not found.
        file("high.rs", "use crate::{mid, low};\n"),
        file(
            "peer.rs",
            "use crate::mid::M; // crate::high is named here only\n",
        ),
        file(
            "mid/c.rs",
            "/// see [`crate::high`]\nfn f() {}\n#[cfg(test)]\nmod tests {\n    use crate::high::T;\n}\n",
        ),
        // A module the table does not know.
        file("stray.rs", "fn f() {}\n"),
        // A test module in its own file, declared under `#[cfg(test)]`: not found.
        file(
            "low.rs",
            "fn f() { crate::mid::g() }\n#[cfg(test)]\nmod tests;\n",
        ),
        file("low/tests.rs", "use crate::high::T;\n"),
        // The same file declared without `#[cfg(test)]` is code: found.
        file("mid/mod.rs", "mod helpers;\n"),
        file("mid/helpers.rs", "use crate::high::T;\n"),
        // Two modules of one layer importing each other: a circle, found once.
        file("mid/d.rs", "use crate::peer::P;\n"),
    ];
    let found = violations(&table, &files);
    assert_eq!(
        found,
        vec![
            "circle: `mid` → `peer` → `mid`".to_string(),
            "low.rs: `low` (layer 1) imports `crate::mid` (layer 2)".to_string(),
            "mid/a.rs: `mid` (layer 2) imports `crate::high` (layer 3)".to_string(),
            "mid/b.rs: `mid` (layer 2) imports `crate::high` (layer 3)".to_string(),
            "mid/helpers.rs: `mid` (layer 2) imports `crate::high` (layer 3)".to_string(),
            "stray.rs: module `stray` has no layer in the table".to_string(),
        ]
    );
}
