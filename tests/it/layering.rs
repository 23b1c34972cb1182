//! The import rules of ARCHITECTURE.md, read from the source itself: which top-level module of the
//! crate names which (`crate::x`, in any `use` or path), and which file of a folder names which
//! (`super::x`, `crate::folder::x`). A new import that breaks a rule fails here, naming the file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

/// Every `.rs` file under `dir`, with its path relative to `src/`.
fn sources(dir: &Path) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path: PathBuf = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(SRC).expect("under src").to_string_lossy().into_owned();
                let text = std::fs::read_to_string(&path).expect("read source");
                found.push((relative, without_comments(&text)));
            }
        }
    }
    found.sort();
    found
}

/// The code of a file without its `//` comments (module docs name other modules on purpose).
fn without_comments(text: &str) -> String {
    text.lines().map(|line| line.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// The names `prefix` is followed by in `code`: `prefix::a`, and each of `prefix::{a, b::c}`.
fn named_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    for (at, _) in code.match_indices(prefix) {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let rest = &code[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            names.extend(group.split(',').map(|part| ident(part.trim())).filter(|n| !n.is_empty()));
        } else {
            names.insert(ident(rest));
        }
    }
    names.remove("self");
    names
}

/// Top-level module → the top-level modules it names.
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, code) in sources(Path::new(SRC)) {
        let module = file.split(['/', '.']).next().expect("a name").to_owned();
        if module == "lib" || module == "main" {
            continue;
        }
        let names = named_after(&code, "crate::");
        graph.entry(module.clone()).or_default().extend(names.into_iter().filter(|n| *n != module));
    }
    graph
}

/// The file that names `target`, for the failure message.
fn who_names(module: &str, target: &str) -> Vec<String> {
    sources(&Path::new(SRC).join(module))
        .into_iter()
        .chain(sources(Path::new(SRC)).into_iter().filter(|(f, _)| *f == format!("{module}.rs")))
        .filter(|(_, code)| named_after(code, "crate::").contains(target))
        .map(|(file, _)| file)
        .collect()
}

#[test]
fn the_layers_import_only_downwards() {
    let graph = module_graph();
    for leaf in ["domain", "common"] {
        let named = graph.get(leaf).cloned().unwrap_or_default();
        assert!(named.is_empty(), "`{leaf}` must import nothing of the crate, but names {named:?}");
    }
    // The store knows no caller: not the HTTP layer, nor the parts that use it.
    for caller in ["http", "auth", "webhook", "timer", "config", "app", "cli", "bench"] {
        assert!(
            !graph["store"].contains(caller),
            "`store` must not import `{caller}`: {:?} do",
            who_names("store", caller)
        );
    }
    // The bus rings after commits; what a stream sends is the HTTP layer's business.
    assert!(!graph["bus"].contains("http"), "`bus` must not import `http`: {:?} do", who_names("bus", "http"));
    for module in ["cli", "webhook", "auth", "timer", "metrics"] {
        assert!(!graph[module].contains("http"), "`{module}` must not import `http`: {:?}", who_names(module, "http"));
    }
}

#[test]
fn no_module_cycles() {
    let graph = module_graph();
    // Depth-first from every module; a module met again on the current path closes a cycle.
    fn visit(graph: &BTreeMap<String, BTreeSet<String>>, path: &mut Vec<String>, done: &mut BTreeSet<String>) {
        let here = path.last().expect("a module").clone();
        for next in graph.get(&here).into_iter().flatten() {
            if let Some(start) = path.iter().position(|m| m == next) {
                panic!("module cycle: {} → {next}", path[start..].join(" → "));
            }
            if done.insert(next.clone()) {
                path.push(next.clone());
                visit(graph, path, done);
                path.pop();
            }
        }
    }
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        visit(&graph, &mut vec![module.clone()], &mut done);
    }
    assert!(graph.contains_key("store") && graph["http"].contains("store"), "the graph was read at all");
}

/// Inside a folder, two files never name each other: one of them holds what both need, or a
/// third file does.
#[test]
fn no_loops_between_files_of_a_folder() {
    let mut loops = Vec::new();
    for folder in std::fs::read_dir(SRC).expect("src").map(|e| e.expect("entry").path()).filter(|p| p.is_dir()) {
        let name = folder.file_name().expect("a name").to_string_lossy().into_owned();
        let files: BTreeMap<String, String> = std::fs::read_dir(&folder)
            .expect("folder")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "rs") && !p.ends_with("mod.rs"))
            .map(|p| {
                let stem = p.file_stem().expect("a stem").to_string_lossy().into_owned();
                (stem, without_comments(&std::fs::read_to_string(&p).expect("read")))
            })
            .collect();
        let names = |code: &str| {
            let mut named = named_after(code, "super::");
            named.extend(named_after(code, &format!("crate::{name}::")));
            named
        };
        for (a, code) in &files {
            for b in names(code).into_iter().filter(|b| b > a && files.contains_key(b)) {
                if names(&files[&b]).contains(a) {
                    loops.push(format!("{name}/{a}.rs ↔ {name}/{b}.rs"));
                }
            }
        }
    }
    assert!(loops.is_empty(), "files that name each other: {loops:?}");
}
