//! The module graphs of the host (`host/src`) and of the session log's crate (`session/src`) have
//! no cycles: none between the top-level modules of a crate, and none between the files of one
//! module — a `mod.rs` with code of its own is one of them (its `mod` and `pub use` lines only
//! declare; test code is left out). Read from the sources: every `crate::…` and `super::…` path
//! outside comments and `#[cfg(test)]` items is an edge. The crates keep their boundaries: the
//! session crate depends on no provider, plugin or command-line code, and only its PostgreSQL
//! backend knows PostgreSQL. And no function is longer than a reader can take in at once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use dsh_e2e::{files_under, workspace_root};

/// A source file's module path, e.g. `["agent", "turn"]`; `mod.rs` and `lib.rs` name their
/// directory's module.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = relative.iter().map(|part| part.to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

/// The source without comments and without `#[cfg(test)]` items.
fn production_code(text: &str) -> String {
    let mut code = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        if trimmed.starts_with("#[cfg(test)]") {
            let mut depth = 0i32;
            let mut opened = false;
            for line in lines.by_ref() {
                depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
                opened |= line.contains('{');
                if opened && depth <= 0 {
                    break;
                }
            }
            continue;
        }
        code.push_str(line);
        code.push('\n');
    }
    code
}

fn identifier(text: &str) -> &str {
    let end = text.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(text.len());
    &text[..end]
}

/// The first segment after every `prefix::` in `code`, with brace groups expanded:
/// `super::{a, b::c}` gives `a` and `b`.
fn first_segments(code: &str, prefix: &str) -> Vec<String> {
    let needle = format!("{prefix}::");
    let mut found = Vec::new();
    for (at, _) in code.match_indices(&needle) {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let rest = &code[at + needle.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item_start = true;
            for (offset, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && (c.is_alphanumeric() || c == '_') => {
                        found.push(identifier(&group[offset..]).to_owned());
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            found.push(identifier(rest).to_owned());
        }
    }
    found
}

/// `pub use child::Item` lines of a `mod.rs`: which child an item re-exported by the parent
/// really lives in.
fn re_exports(code: &str) -> BTreeMap<String, String> {
    let mut items = BTreeMap::new();
    for line in code.lines().map(str::trim) {
        let Some(path) = line.strip_prefix("pub use ") else { continue };
        let child = identifier(path).to_owned();
        let rest = &path[child.len()..];
        let Some(rest) = rest.strip_prefix("::") else { continue };
        let names = rest.trim_end_matches(';').trim_start_matches('{').trim_end_matches('}');
        for name in names.split(',') {
            let name = name.trim().rsplit("::").next().unwrap_or_default();
            if !name.is_empty() {
                items.insert(name.to_owned(), child.clone());
            }
        }
    }
    items
}

/// A cycle in `graph`, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = stack.iter().position(|on| on == node) {
            let mut cycle = stack[start..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if !done.insert(node.to_owned()) {
            return None;
        }
        stack.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, done, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|node| visit(node, graph, &mut done, &mut Vec::new()))
}

struct Source {
    module: Vec<String>,
    is_parent: bool,
    code: String,
}

/// The crates whose module graphs are checked.
const CRATES: [&str; 2] = ["host/src", "session/src"];

fn sources(crate_src: &str) -> Vec<Source> {
    let src = workspace_root().join(crate_src);
    files_under(&src)
        .into_iter()
        .filter(|file| file.extension().is_some_and(|ext| ext == "rs"))
        .map(|file| {
            let name = file.file_stem().unwrap().to_string_lossy().into_owned();
            Source {
                module: module_path(&src, &file),
                is_parent: matches!(name.as_str(), "mod" | "lib" | "main"),
                code: production_code(&std::fs::read_to_string(&file).unwrap()),
            }
        })
        .collect()
}

#[test]
fn top_level_modules_of_each_crate_form_no_cycle() {
    for crate_src in CRATES {
        let sources = sources(crate_src);
        let top: BTreeSet<String> = sources.iter().filter_map(|source| source.module.first().cloned()).collect();
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for source in &sources {
            let Some(from) = source.module.first() else { continue };
            for target in first_segments(&source.code, "crate") {
                if top.contains(&target) && target != *from {
                    graph.entry(from.clone()).or_default().insert(target);
                }
            }
        }
        assert!(
            graph.values().map(BTreeSet::len).sum::<usize>() > 10,
            "the scan found {crate_src}'s imports: {graph:?}"
        );
        assert_eq!(find_cycle(&graph), None, "a cycle between top-level modules of {crate_src}");
    }
}

/// What a parent's own code (`mod.rs`, `lib.rs`) is called in its module's graph.
const PARENT: &str = "(mod)";

/// A parent file's code without the lines that only declare its children (`mod x;`, `pub use
/// x::…;`).
fn own_code(code: &str) -> String {
    let declares = |line: &str| {
        let line = line.trim_start();
        let public = line.strip_prefix("pub(crate) ").or_else(|| line.strip_prefix("pub "));
        line.trim_start_matches("pub(crate) ").trim_start_matches("pub ").starts_with("mod ")
            || public.is_some_and(|rest| rest.starts_with("use "))
    };
    code.lines().filter(|line| !declares(line)).collect::<Vec<_>>().join("\n")
}

/// Whether `code` names module `child` as a path (`child::…`, not `other_child::…`).
fn names_module(code: &str, child: &str) -> bool {
    code.match_indices(&format!("{child}::"))
        .any(|(at, _)| !code[..at].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':'))
}

/// The edges between the files of the module `parent` is the `mod.rs` of: from each child to
/// the siblings and to the parent's own items it names, and from the parent's own code to the
/// children it names.
fn module_graph(sources: &[Source], parent: &Source) -> BTreeMap<String, BTreeSet<String>> {
    let is_child =
        |source: &&Source| source.module.len() == parent.module.len() + 1 && source.module.starts_with(&parent.module);
    let children: BTreeSet<String> =
        sources.iter().filter(is_child).map(|source| source.module.last().unwrap().clone()).collect();
    let exported = re_exports(&parent.code);
    let sibling = |name: &str| -> Option<String> {
        match children.contains(name) {
            true => Some(name.to_owned()),
            false if name == "super" => None,
            false => Some(exported.get(name).cloned().unwrap_or_else(|| PARENT.to_owned())),
        }
    };
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for source in sources.iter().filter(is_child).filter(|source| !source.is_parent) {
        let from = source.module.last().unwrap().clone();
        let mut targets: Vec<String> =
            first_segments(&source.code, "super").iter().filter_map(|t| sibling(t)).collect();
        if !parent.module.is_empty() {
            let absolute = format!("crate::{}", parent.module.join("::"));
            targets.extend(first_segments(&source.code, &absolute).iter().filter_map(|t| sibling(t)));
        }
        graph.entry(from.clone()).or_default().extend(targets.into_iter().filter(|target| *target != from));
    }
    let own = own_code(&parent.code);
    let named: BTreeSet<String> = children.iter().filter(|child| names_module(&own, child)).cloned().collect();
    graph.entry(PARENT.to_owned()).or_default().extend(named);
    graph
}

#[test]
fn the_files_of_a_module_form_no_cycle_its_mod_rs_included() {
    let mut edges = 0;
    let mut cycles = Vec::new();
    for crate_src in CRATES {
        let sources = sources(crate_src);
        for parent in sources.iter().filter(|source| source.is_parent) {
            let graph = module_graph(&sources, parent);
            edges += graph.values().map(BTreeSet::len).sum::<usize>();
            if let Some(cycle) = find_cycle(&graph) {
                cycles.push(format!("{crate_src} {:?}: {}", parent.module, cycle.join(" → ")));
            }
        }
    }
    assert!(cycles.is_empty(), "cycles between the files of a module:\n{}", cycles.join("\n"));
    assert!(edges > 20, "the scan found the sibling imports ({edges})");
}

#[test]
fn the_session_crate_keeps_its_boundaries() {
    let root = workspace_root();
    let manifest = std::fs::read_to_string(root.join("session/Cargo.toml")).unwrap();
    for foreign in ["dsh-host", "llm-retry", "relay-retry", "dsh-retry", "route-failover", "retry-budget", "clap"] {
        assert!(!manifest.contains(&format!("\n{foreign}")), "dsh-session depends on {foreign}");
    }
    assert!(manifest.contains("tokio-postgres = { workspace = true, optional = true }"), "PostgreSQL is a feature");
    for file in files_under(&root.join("session/src")) {
        let relative = file.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
        let code = production_code(&std::fs::read_to_string(&file).unwrap());
        // The store module picks the backend; only the backend itself may know PostgreSQL.
        if !relative.starts_with("session/src/store/") {
            assert!(!code.contains("tokio_postgres") && !code.contains("postgres::"), "{relative} knows PostgreSQL");
        }
    }
}

#[test]
fn the_scan_sees_groups_re_exports_and_cycles() {
    let code = "use super::{gate::Gate, reader};\nlet x = crate::bundled::package(name);\nfoo::super::no;";
    assert_eq!(first_segments(code, "super"), ["gate", "reader"]);
    assert_eq!(first_segments(code, "crate"), ["bundled"]);
    assert_eq!(re_exports("pub use assembly::Assembly;\npub use cancel::{Cancel, Other};"), {
        BTreeMap::from([
            ("Assembly".to_owned(), "assembly".to_owned()),
            ("Cancel".to_owned(), "cancel".to_owned()),
            ("Other".to_owned(), "cancel".to_owned()),
        ])
    });
    let graph = BTreeMap::from([
        ("a".to_owned(), BTreeSet::from(["b".to_owned()])),
        ("b".to_owned(), BTreeSet::from(["a".to_owned()])),
    ]);
    assert_eq!(find_cycle(&graph), Some(vec!["a".to_owned(), "b".to_owned(), "a".to_owned()]));
    assert_eq!(production_code("a\n// crate::x\n#[cfg(test)]\nmod tests {\n  crate::y\n}\nb\n"), "a\nb\n");
}

/// The fuzz targets `fuzz/Cargo.toml` declares, by name.
fn declared_fuzz_targets(manifest: &str) -> Vec<String> {
    let mut lines = manifest.lines();
    let mut names = Vec::new();
    while let Some(line) = lines.next() {
        if line.trim() == "[[bin]]" {
            let name = lines.next().and_then(|line| line.strip_prefix("name = \"")?.strip_suffix('"'));
            names.push(name.expect("a [[bin]] of fuzz/Cargo.toml starts with its name").to_owned());
        }
    }
    names
}

#[test]
fn every_fuzz_target_calls_its_check_and_the_check_holds_over_the_seed_corpus() {
    let fuzz = workspace_root().join("fuzz");
    let declared: BTreeSet<String> =
        declared_fuzz_targets(&std::fs::read_to_string(fuzz.join("Cargo.toml")).unwrap()).into_iter().collect();
    let checked: BTreeSet<String> = dsh_e2e::fuzz::TARGETS.iter().map(|(name, _)| name.to_string()).collect();
    assert_eq!(declared, checked, "fuzz/Cargo.toml and dsh_e2e::fuzz::TARGETS name other targets");
    for (name, check) in dsh_e2e::fuzz::TARGETS {
        let target = std::fs::read_to_string(fuzz.join(format!("fuzz_targets/{name}.rs"))).unwrap();
        assert!(target.contains(&format!("dsh_e2e::fuzz::{name}(")), "fuzz_targets/{name}.rs does not call its check");
        let seeds = files_under(&fuzz.join("corpus").join(name));
        assert!(!seeds.is_empty(), "fuzz target {name} has no seed corpus");
        for seed in seeds {
            check(&std::fs::read(&seed).unwrap());
        }
    }
}

/// The most lines a function (signature to closing brace, tests included) may take.
const MAX_FUNCTION_LINES: usize = 80;

/// The functions of `text` longer than `limit` lines, as `name (N lines, from line L)`. A function
/// starts at a line whose first word (after `pub`, `async`, …) is `fn` and ends at the first `}`
/// at its own indentation, as rustfmt lays code out.
fn long_functions(text: &str, limit: usize) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let code = line.trim_start();
        let indent = &line[..line.len() - code.len()];
        let words: Vec<&str> = code.split_whitespace().collect();
        let fn_at = words.iter().position(|word| *word == "fn").filter(|at| {
            words[..*at]
                .iter()
                .all(|word| word.starts_with("pub") || ["async", "const", "unsafe", "extern", "\"C\""].contains(word))
        });
        let (Some(at), false) = (fn_at, code.ends_with(';')) else { continue };
        let closing = format!("{indent}}}");
        let Some(length) = lines[start + 1..].iter().position(|line| *line == closing) else { continue };
        if length + 2 > limit {
            let name = identifier(words.get(at + 1).copied().unwrap_or_default());
            found.push(format!("{name} ({} lines, from line {})", length + 2, start + 1));
        }
    }
    found
}

#[test]
fn no_function_is_longer_than_the_limit() {
    let root = workspace_root();
    let mut found = Vec::new();
    for dir in ["host/src", "session/src", "abi/src", "plugins"] {
        for file in
            files_under(&root.join(dir)).into_iter().filter(|file| file.extension().is_some_and(|ext| ext == "rs"))
        {
            for long in long_functions(&std::fs::read_to_string(&file).unwrap(), MAX_FUNCTION_LINES) {
                found.push(format!("{}: {long}", file.strip_prefix(&root).unwrap().display()));
            }
        }
    }
    assert!(found.is_empty(), "functions over {MAX_FUNCTION_LINES} lines:\n{}", found.join("\n"));
}

#[test]
fn the_length_scan_counts_a_function_from_its_signature_to_its_brace() {
    let text = [
        "pub(crate) async fn short() {",
        "    let x = 1;",
        "    let y = 2;",
        "    x + y",
        "}",
        "impl A {",
        "    fn inner(&self) {",
        "        one();",
        "        two();",
        "        three();",
        "    }",
        "    fn declared(&self);",
        "}",
    ]
    .join("\n");
    assert_eq!(long_functions(&text, 4), ["short (5 lines, from line 1)", "inner (5 lines, from line 7)"]);
    assert!(long_functions(&text, 5).is_empty());
}
