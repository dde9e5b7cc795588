//! The crate's layers import one way only, and no two files import each other.
//!
//! Each top-level module of `src/` is one stage of the data's path; a file may use only its own
//! stage and the stages below it (the order below, from `docs/design.md`). Inside a stage, the
//! files form no import cycle: a parent `mod.rs` that re-exports a child counts as importing it,
//! so a child imports what it needs from the file that defines it, not through its parent.
//!
//! The check reads the source text: every `use` tree and every inline `crate::`, `super::`,
//! `self::` or child-module path outside `#[cfg(test)]` items, resolved to the longest module
//! path that is a file. A failure names each offending line.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The stages, bottom first. `failpoint`, `sqlstate`, `locks`, `location`, `devserver` and
/// `allocator` are support code that imports no stage of the crate, so every stage (and the
/// tests) may use them.
const LAYERS: &[&str] = &[
    "failpoint",
    "sqlstate",
    "locks",
    "location",
    "devserver",
    "allocator",
    "change",
    "source",
    "state",
    "capture",
    "durable",
    "provider",
    "sinks",
    "sql",
    "engine",
    "config",
    "frontend",
    "main",
];

/// One source file as a module.
#[derive(Debug)]
struct File {
    path: PathBuf,
    /// Module path below the crate root (`["source", "binlog", "rows"]`); `["main"]` for the
    /// binary.
    module: Vec<String>,
    /// The text with comments, strings and `#[cfg(test)]` items blanked out (lines kept).
    code: String,
    /// The original lines, for messages.
    lines: Vec<String>,
}

/// A use of another module: which line, and the module path it names.
#[derive(Debug)]
struct Reference {
    line: usize,
    path: Vec<String>,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn module_of(src: &Path, path: &Path) -> Vec<String> {
    let rel = path.strip_prefix(src).expect("a file under src");
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    if parts == ["lib"] {
        parts.clear();
    }
    parts
}

/// Blanks comments, string and char literals (keeping newlines), so paths inside them do not
/// count.
fn strip_comments_and_strings(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_char_before(&b, i)
        {
            // Raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|h| b.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &ch in &b[i..j.min(b.len())] {
                out.push(blank(ch));
            }
            i = j;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < b.len() {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\''), or a lifetime ('a), which stays.
            let end = if next == Some('\\') {
                (i + 2..b.len().min(i + 12)).find(|&j| b[j] == '\'')
            } else if b.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(end) => {
                    for _ in i..=end {
                        out.push(' ');
                    }
                    i = end + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_char_before(b: &[char], i: usize) -> bool {
    i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_')
}

/// Blanks every item under `#[cfg(test)]` (test modules and test-only helpers).
fn strip_test_items(code: &str) -> String {
    let mut b: Vec<char> = code.chars().collect();
    let marker: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + marker.len() <= b.len() {
        if b[i..i + marker.len()] != marker[..] {
            i += 1;
            continue;
        }
        // The item ends at its matching closing brace, or at `;` for a braceless item.
        let mut j = i + marker.len();
        let mut depth = 0usize;
        while j < b.len() {
            match b[j] {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                ';' if depth == 0 => break,
                _ => {}
            }
            j += 1;
        }
        let end = (j + 1).min(b.len());
        for c in b.iter_mut().take(end).skip(i) {
            if *c != '\n' {
                *c = ' ';
            }
        }
        i = j + 1;
    }
    b.into_iter().collect()
}

fn line_of(code: &str, offset: usize) -> usize {
    code[..offset].matches('\n').count() + 1
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Expands one `use` tree (`a::b::{c, d::{e, f as g}, self}`) into full paths.
fn expand_use_tree(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    if tree.is_empty() {
        return;
    }
    // Split off a leading path, up to a `{` group.
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = tree[..open]
            .split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        let close = tree.rfind('}').unwrap_or(tree.len());
        let inner = &tree[open + 1..close];
        let mut base = prefix.to_vec();
        base.extend(head);
        let mut depth = 0;
        let mut start = 0;
        for (k, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_use_tree(&base, &inner[start..k], out);
                    start = k + 1;
                }
                _ => {}
            }
        }
        expand_use_tree(&base, &inner[start..], out);
    } else {
        let path = tree.split(" as ").next().unwrap_or(tree);
        let mut full = prefix.to_vec();
        full.extend(
            path.split("::")
                .map(str::trim)
                .filter(|s| !s.is_empty() && *s != "self" && *s != "*")
                .map(String::from),
        );
        out.push(full);
    }
}

/// Makes a path that starts with `crate`, `super`, `self` or one of `children` absolute
/// (below the crate root); `None` for paths into other crates.
fn absolute(file: &File, children: &BTreeSet<String>, path: &[String]) -> Option<Vec<String>> {
    let first = path.first()?;
    // The module a relative path starts from: a `mod.rs` (or lib.rs) is its own module; any
    // other file too (its children live in a folder of its name).
    let here = &file.module;
    match first.as_str() {
        "crate" => Some(path[1..].to_vec()),
        "self" => Some(here.iter().chain(&path[1..]).cloned().collect()),
        "super" => {
            let mut base = here.clone();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
            Some(base.into_iter().chain(rest.iter().cloned()).collect())
        }
        name if children.contains(name) => Some(here.iter().chain(path).cloned().collect()),
        _ => None,
    }
}

/// Every module path a file names, with its line.
fn references(file: &File) -> Vec<Reference> {
    let code = &file.code;
    let children: BTreeSet<String> = {
        let mut set = BTreeSet::new();
        for line in code.lines() {
            let t = line.trim_start();
            let t = t
                .strip_prefix("pub(crate) ")
                .or_else(|| t.strip_prefix("pub(super) "))
                .or_else(|| t.strip_prefix("pub "))
                .unwrap_or(t);
            if let Some(rest) = t.strip_prefix("mod ") {
                if let Some(name) = rest.strip_suffix(';') {
                    set.insert(name.trim().to_string());
                }
            }
        }
        set
    };
    let mut out = Vec::new();
    // `use` declarations, possibly spanning lines; blanked once read, so the scan for inline
    // paths below does not see them again.
    let mut rest: Vec<char> = code.chars().collect();
    let bytes = code.as_bytes();
    let mut search = 0;
    while let Some(found) = code[search..].find("use ") {
        let at = search + found;
        search = at + 4;
        if at > 0 && is_ident(bytes[at - 1] as char) {
            continue;
        }
        let Some(end) = code[at..].find(';') else {
            break;
        };
        let tree = &code[at + 4..at + end];
        if tree.contains('(') || tree.contains('=') {
            continue; // not a use declaration
        }
        let mut paths = Vec::new();
        expand_use_tree(&[], &tree.replace(char::is_whitespace, " "), &mut paths);
        for path in paths {
            if let Some(abs) = absolute(file, &children, &path) {
                out.push(Reference {
                    line: line_of(code, at),
                    path: abs,
                });
            }
        }
        // Sources are ASCII outside comments and strings, which are blanked already.
        let (from, to) = (code[..at].chars().count(), code[..at + end].chars().count());
        for c in rest.iter_mut().take(to).skip(from) {
            if *c != '\n' {
                *c = ' ';
            }
        }
        search = at + end;
    }
    let code = blank_visibility_paths(&rest.into_iter().collect::<String>());
    // Inline paths: `crate::a::b`, `super::x`, `self::y`, `child::z`.
    let chars: Vec<(usize, char)> = code.char_indices().collect();
    let mut k = 0;
    while k < chars.len() {
        let (offset, c) = chars[k];
        if !is_ident(c) || (k > 0 && (is_ident(chars[k - 1].1) || chars[k - 1].1 == ':')) {
            k += 1;
            continue;
        }
        // Read an ident chain joined by `::`.
        let mut segments = Vec::new();
        let mut j = k;
        loop {
            let start = j;
            while j < chars.len() && is_ident(chars[j].1) {
                j += 1;
            }
            if start == j {
                break;
            }
            let end = chars.get(j).map_or(code.len(), |c| c.0);
            segments.push(code[chars[start].0..end].to_string());
            if j + 1 < chars.len() && chars[j].1 == ':' && chars[j + 1].1 == ':' {
                j += 2;
            } else {
                break;
            }
        }
        if segments.len() > 1 {
            if let Some(abs) = absolute(file, &children, &segments) {
                out.push(Reference {
                    line: line_of(&code, offset),
                    path: abs,
                });
            }
        }
        k = j.max(k + 1);
    }
    out
}

/// `code` with every visibility restriction (`pub(in crate::frontend)`) blanked: it names a
/// module without using anything of it.
fn blank_visibility_paths(code: &str) -> String {
    let mut out = code.to_string();
    let mut from = 0;
    while let Some(at) = out[from..].find("pub(in ") {
        let start = from + at;
        let Some(len) = out[start..].find(')') else {
            break;
        };
        out.replace_range(start..=start + len, &" ".repeat(len + 1));
        from = start + len + 1;
    }
    out
}

/// The file a module path lands in: its longest prefix that is a file.
fn resolve<'a>(modules: &'a BTreeMap<Vec<String>, usize>, path: &[String]) -> Option<&'a usize> {
    (1..=path.len()).rev().find_map(|n| modules.get(&path[..n]))
}

fn layer(module: &[String]) -> Option<usize> {
    let top = module.first()?;
    LAYERS.iter().position(|l| l == top)
}

fn load() -> Vec<File> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("readable source");
            let mut module = module_of(&src, &path);
            if module == ["main"] {
                module = vec!["main".into()];
            }
            File {
                code: strip_test_items(&strip_comments_and_strings(&text)),
                lines: text.lines().map(String::from).collect(),
                module,
                path,
            }
        })
        .collect()
}

/// Import edges between files: (from, to) → lines of `from` that make it.
fn edges(files: &[File]) -> BTreeMap<(usize, usize), Vec<usize>> {
    let modules: BTreeMap<Vec<String>, usize> = files
        .iter()
        .enumerate()
        .filter(|(_, f)| f.module != ["main"])
        .map(|(i, f)| (f.module.clone(), i))
        .collect();
    let mut out: BTreeMap<(usize, usize), Vec<usize>> = BTreeMap::new();
    for (i, file) in files.iter().enumerate() {
        if file.module.is_empty() {
            continue; // lib.rs only declares the stages
        }
        let own: Vec<String> = if file.module == ["main"] {
            vec![]
        } else {
            file.module.clone()
        };
        let file_for_paths = File {
            path: file.path.clone(),
            module: own,
            code: file.code.clone(),
            lines: vec![],
        };
        for r in references(&file_for_paths) {
            // The binary names the library by its crate name.
            let path =
                if file.module == ["main"] && r.path.first().is_some_and(|s| s == "cdcfusion") {
                    r.path[1..].to_vec()
                } else {
                    r.path
                };
            if let Some(&to) = resolve(&modules, &path) {
                if to != i && !files[to].module.is_empty() {
                    let lines = out.entry((i, to)).or_default();
                    if !lines.contains(&r.line) {
                        lines.push(r.line);
                    }
                }
            }
        }
    }
    out
}

fn describe(files: &[File], from: usize, line: usize) -> String {
    let f = &files[from];
    let rel = f
        .path
        .strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(&f.path);
    let text = f.lines.get(line - 1).map_or("", |l| l.trim());
    format!("{}:{line}: {text}", rel.display())
}

#[test]
fn every_file_imports_only_its_own_layer_and_those_below() {
    let files = load();
    let mut problems = String::new();
    for file in &files {
        if !file.module.is_empty() && layer(&file.module).is_none() {
            writeln!(
                problems,
                "{}: a top-level module in no layer",
                file.path.display()
            )
            .unwrap();
        }
    }
    for ((from, to), lines) in edges(&files) {
        let (Some(a), Some(b)) = (layer(&files[from].module), layer(&files[to].module)) else {
            continue;
        };
        let support = a <= 1;
        if b > a || (support && a != b) {
            for line in lines {
                writeln!(
                    problems,
                    "{} (layer `{}` uses layer `{}`)",
                    describe(&files, from, line),
                    LAYERS[a],
                    LAYERS[b]
                )
                .unwrap();
            }
        }
    }
    assert!(
        problems.is_empty(),
        "imports against the layers:\n{problems}"
    );
}

/// The lowest layer that may use DataFusion: below it, stages deal in Arrow only, so the
/// capture does not depend on the query engine (the plans over the server live in `provider`).
const FIRST_DATAFUSION_LAYER: &str = "provider";

#[test]
fn only_the_query_layers_use_datafusion() {
    let first = LAYERS
        .iter()
        .position(|l| *l == FIRST_DATAFUSION_LAYER)
        .expect("a layer");
    let mut problems = String::new();
    for file in load() {
        if layer(&file.module).is_none_or(|l| l >= first) {
            continue;
        }
        for (n, line) in file.code.lines().enumerate() {
            let uses = line
                .split(|c: char| !is_ident(c))
                .any(|word| word == "datafusion" || word.starts_with("datafusion_"));
            if uses {
                let rel = file
                    .path
                    .strip_prefix(env!("CARGO_MANIFEST_DIR"))
                    .unwrap_or(&file.path)
                    .display()
                    .to_string();
                writeln!(problems, "{rel}:{}: {}", n + 1, file.lines[n].trim()).unwrap();
            }
        }
    }
    assert!(
        problems.is_empty(),
        "DataFusion below the `{FIRST_DATAFUSION_LAYER}` layer:\n{problems}"
    );
}

#[test]
fn no_files_import_each_other_in_a_circle() {
    let files = load();
    let edges = edges(&files);
    let mut graph: Vec<Vec<usize>> = vec![vec![]; files.len()];
    for &(a, b) in edges.keys() {
        graph[a].push(b);
    }
    // Tarjan's strongly connected components.
    struct Tarjan<'g> {
        graph: &'g [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        components: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for &w in &self.graph[v] {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut component = vec![];
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.components.push(component);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph: &graph,
        index: vec![None; files.len()],
        low: vec![0; files.len()],
        on_stack: vec![false; files.len()],
        stack: vec![],
        next: 0,
        components: vec![],
    };
    for v in 0..files.len() {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    let mut problems = String::new();
    for component in &t.components {
        let names: Vec<String> = component
            .iter()
            .map(|&i| files[i].module.join("::"))
            .collect();
        writeln!(problems, "cycle among {}:", names.join(", ")).unwrap();
        for &a in component {
            for &b in component {
                if let Some(lines) = edges.get(&(a, b)) {
                    for &line in lines {
                        writeln!(problems, "  {}", describe(&files, a, line)).unwrap();
                    }
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "files that import each other:\n{problems}"
    );
}

#[test]
fn the_checker_sees_what_it_must() {
    let file = File {
        path: PathBuf::from("src/source/binlog/rows.rs"),
        module: vec!["source".into(), "binlog".into(), "rows".into()],
        code: strip_test_items(&strip_comments_and_strings(
            "use super::{layout::{Cursor, Layout}, decimal};\nuse crate::state::merge::X as Y;\n\
             // use crate::engine::Engine;\nlet s = \"crate::frontend::x\";\n\
             fn f() { crate::capture::Capture::start(); }\npub(in crate::source) fn g() {}\n#[cfg(test)]\nmod tests { use crate::sql::A; }\n",
        )),
        lines: vec![],
    };
    let paths: Vec<String> = references(&file)
        .iter()
        .map(|r| format!("{}:{}", r.line, r.path.join("::")))
        .collect();
    assert_eq!(
        paths,
        [
            "1:source::binlog::layout::Cursor",
            "1:source::binlog::layout::Layout",
            "1:source::binlog::decimal",
            "2:state::merge::X",
            "5:capture::Capture::start",
        ]
    );
}
