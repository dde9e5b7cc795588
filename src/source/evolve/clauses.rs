//! The MySQL syntax the SQL parser does not read, brought to what it does read: column
//! attributes it lacks are rewritten before parsing, and an `ALTER TABLE` it rejects is split
//! into its comma-separated clauses, each known to keep rows and columns or parsed alone.
//!
//! # Invariant
//! A clause is only ever classified as keeping rows and columns by its leading keywords when
//! MySQL gives those keywords no other meaning; everything else is parsed or refused.

use sqlparser::ast::{AlterTableOperation, Ident, Statement};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer};

/// One clause of an `ALTER TABLE`, in statement order.
#[derive(Debug, Clone)]
pub enum Step {
    Op(Box<AlterTableOperation>),
    /// Keeps every row, column and index (table options, partition maintenance).
    Keep,
    /// `RENAME {INDEX|KEY} from TO to`.
    RenameIndex {
        from: String,
        to: String,
    },
    /// Changes the table's default character set, which columns declared later inherit.
    TableCharset,
}

/// A significant token and the byte offset where it starts in the text.
struct Tok {
    token: Token,
    start: usize,
}

impl Tok {
    /// The upper-cased word, for unquoted words only.
    fn keyword(&self) -> Option<String> {
        match &self.token {
            Token::Word(w) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
            _ => None,
        }
    }
}

/// The tokens of `text` other than whitespace and comments; `None` when it does not tokenize.
fn tokens(text: &str) -> Option<Vec<Tok>> {
    let spans = Tokenizer::new(&MySqlDialect {}, text)
        .tokenize_with_location()
        .ok()?;
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    spans
        .into_iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_) | Token::EOF))
        .map(|t| {
            let line =
                *line_starts.get(usize::try_from(t.span.start.line).ok()?.checked_sub(1)?)?;
            let column = usize::try_from(t.span.start.column).ok()?.checked_sub(1)?;
            let start = match text[line..].char_indices().nth(column) {
                Some((i, _)) => line + i,
                None => text.len(),
            };
            Some(Tok {
                token: t.token,
                start,
            })
        })
        .collect()
}

/// Rewrites column attributes MySQL has and the parser lacks into equivalent ones it reads:
/// `ZEROFILL` (which implies `UNSIGNED`) and `CHARSET x` for `CHARACTER SET x`.
pub fn rewrite_attributes(text: &str) -> String {
    let Some(toks) = tokens(text) else {
        return text.to_string();
    };
    let mut edits: Vec<(usize, usize, &str)> = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        let prev = i.checked_sub(1).and_then(|p| toks[p].keyword());
        let word_len = match &t.token {
            Token::Word(w) => w.value.len(),
            _ => continue,
        };
        match t.keyword().as_deref() {
            Some("ZEROFILL") => {
                let with = if prev.as_deref() == Some("UNSIGNED") {
                    ""
                } else {
                    "UNSIGNED"
                };
                edits.push((t.start, t.start + word_len, with));
            }
            // `CHARSET=` and `DEFAULT CHARSET` are table options the parser reads as they are.
            Some("CHARSET")
                if prev.as_deref() != Some("DEFAULT")
                    && matches!(toks.get(i + 1).map(|n| &n.token), Some(Token::Word(_))) =>
            {
                edits.push((t.start, t.start + word_len, "CHARACTER SET"));
            }
            _ => {}
        }
    }
    let mut out = text.to_string();
    for (start, end, with) in edits.into_iter().rev() {
        if out.is_char_boundary(start) && out.is_char_boundary(end) && end <= out.len() {
            out.replace_range(start..end, with);
        }
    }
    out
}

/// `ANALYZE`/`OPTIMIZE`/`CHECK`/`CHECKSUM TABLE ...` (optionally `NO_WRITE_TO_BINLOG` or
/// `LOCAL`): statistics, checks and rebuilds that keep every row and column.
pub fn is_maintenance(text: &str) -> bool {
    let Some(toks) = tokens(text) else {
        return false;
    };
    let words: Vec<String> = toks.iter().take(3).map_while(Tok::keyword).collect();
    let first = words.first().map(String::as_str);
    let table = words
        .iter()
        .skip(1)
        .find(|w| *w != "NO_WRITE_TO_BINLOG" && *w != "LOCAL");
    matches!(first, Some("ANALYZE" | "OPTIMIZE" | "CHECK" | "CHECKSUM"))
        && table.is_some_and(|w| w == "TABLE" || w == "TABLES")
}

/// An `ALTER TABLE` read clause by clause.
pub struct AlterClauses {
    /// The table's name, as written (`[db, table]` or `[table]`).
    pub name: Vec<String>,
    /// The clauses in order, or why one cannot be followed.
    pub steps: Result<Vec<Step>, String>,
}

/// `ALTER [ONLINE|IGNORE] TABLE name clause, clause, ...`; `None` when the text is no
/// `ALTER TABLE`.
pub fn alter_clauses(text: &str) -> Option<AlterClauses> {
    let toks = tokens(text)?;
    let mut i = 0;
    (toks.first()?.keyword()? == "ALTER").then_some(())?;
    i += 1;
    while matches!(
        toks.get(i)?.keyword().as_deref(),
        Some("ONLINE" | "OFFLINE" | "IGNORE")
    ) {
        i += 1;
    }
    (toks.get(i)?.keyword()? == "TABLE").then_some(())?;
    i += 1;
    let mut name = Vec::new();
    loop {
        let Token::Word(w) = &toks.get(i)?.token else {
            return None;
        };
        name.push(w.value.clone());
        i += 1;
        if toks.get(i).map(|t| &t.token) != Some(&Token::Period) {
            break;
        }
        i += 1;
    }
    let mut clauses = Vec::new();
    let mut depth = 0i32;
    let mut start = i;
    for (j, t) in toks.iter().enumerate().skip(i) {
        match t.token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            Token::Comma if depth == 0 => {
                clauses.push(start..j);
                start = j + 1;
            }
            _ => {}
        }
    }
    clauses.push(start..toks.len());
    let text_of = |r: &std::ops::Range<usize>| -> &str {
        let from = toks.get(r.start).map_or(text.len(), |t| t.start);
        let to = toks.get(r.end).map_or(text.len(), |t| t.start);
        text.get(from..to)
            .unwrap_or("")
            .trim()
            .trim_end_matches(';')
            .trim()
    };
    let steps = clauses
        .iter()
        .filter(|r| !r.is_empty())
        .map(|r| clause_steps(&toks[r.clone()], text_of(r)))
        .collect::<Result<Vec<Vec<Step>>, String>>()
        .map(|s| s.into_iter().flatten().collect());
    Some(AlterClauses { name, steps })
}

/// Clause starts that keep every row and column.
const KEEPS: &[&[&str]] = &[
    &["ENGINE"],
    &["COMMENT"],
    &["ROW_FORMAT"],
    &["KEY_BLOCK_SIZE"],
    &["AUTO_INCREMENT"],
    &["AVG_ROW_LENGTH"],
    &["CHECKSUM"],
    &["MAX_ROWS"],
    &["MIN_ROWS"],
    &["PACK_KEYS"],
    &["STATS_AUTO_RECALC"],
    &["STATS_PERSISTENT"],
    &["STATS_SAMPLE_PAGES"],
    &["DELAY_KEY_WRITE"],
    &["COMPRESSION"],
    &["ENCRYPTION"],
    &["PAGE_COMPRESSED"],
    &["PAGE_COMPRESSION_LEVEL"],
    &["TRANSACTIONAL"],
    &["ALGORITHM"],
    &["LOCK"],
    &["FORCE"],
    &["ORDER", "BY"],
    &["ENABLE", "KEYS"],
    &["DISABLE", "KEYS"],
    &["ADD", "FOREIGN"],
    &["ADD", "PARTITION"],
    &["DROP", "FOREIGN"],
    &["DROP", "CHECK"],
    &["ALTER", "INDEX"],
    &["ALTER", "CHECK"],
    &["PARTITION", "BY"],
    &["REMOVE", "PARTITIONING"],
    &["REORGANIZE", "PARTITION"],
    &["COALESCE", "PARTITION"],
    &["REBUILD", "PARTITION"],
    &["ANALYZE", "PARTITION"],
    &["CHECK", "PARTITION"],
    &["OPTIMIZE", "PARTITION"],
    &["REPAIR", "PARTITION"],
];

/// Clause starts that add a secondary index: read when the parser reads them, else kept
/// without the index (an index the engine lacks only makes lookups scan).
const ADDS_INDEX: &[&[&str]] = &[
    &["ADD", "INDEX"],
    &["ADD", "KEY"],
    &["ADD", "UNIQUE"],
    &["ADD", "FULLTEXT"],
    &["ADD", "SPATIAL"],
];

/// Clause starts that change the table's default character set only.
const CHARSET: &[&[&str]] = &[
    &["DEFAULT", "CHARSET"],
    &["DEFAULT", "CHARACTER", "SET"],
    &["DEFAULT", "COLLATE"],
    &["CHARSET"],
    &["CHARACTER", "SET"],
    &["COLLATE"],
];

/// Clause starts that change rows in ways no schema describes.
const REFUSED: &[(&[&str], &str)] = &[
    (
        &["DROP", "PARTITION"],
        "removes the rows of those partitions",
    ),
    (
        &["TRUNCATE", "PARTITION"],
        "removes the rows of those partitions",
    ),
    (
        &["EXCHANGE", "PARTITION"],
        "swaps in the rows of another table",
    ),
    (&["DISCARD"], "removes the table's data"),
    (&["IMPORT"], "brings in rows from files"),
    (&["CONVERT", "TO"], "converts every text column"),
];

fn clause_steps(toks: &[Tok], text: &str) -> Result<Vec<Step>, String> {
    let words: Vec<String> = toks.iter().take(3).map_while(Tok::keyword).collect();
    let starts = |p: &[&str]| starts_with(&words, p);
    if let Some((_, why)) = REFUSED.iter().find(|(p, _)| starts(&p[..])) {
        return Err(format!("{text}: {why}"));
    }
    // `DROP KEY `PRIMARY`` names the primary key; any other key is secondary.
    if starts(&["DROP", "KEY"][..]) {
        let primary = matches!(toks.get(2).map(|t| &t.token),
            Some(Token::Word(w)) if w.value.eq_ignore_ascii_case("PRIMARY"));
        // Every clause here keeps rows and columns: one not read keeps the indexes too.
        let name = match toks.get(2).map(|t| &t.token) {
            Some(Token::Word(w)) => w.value.clone(),
            _ => return Ok(vec![Step::Keep]),
        };
        return Ok(vec![Step::Op(Box::new(match primary {
            true => AlterTableOperation::DropPrimaryKey {
                drop_behavior: None,
            },
            false => AlterTableOperation::DropIndex {
                name: Ident::new(name),
            },
        }))]);
    }
    if starts(&["RENAME", "INDEX"][..]) || starts(&["RENAME", "KEY"][..]) {
        let word = |i: usize| match toks.get(i).map(|t| &t.token) {
            Some(Token::Word(w)) => Some(w.value.clone()),
            _ => None,
        };
        return match (word(2), toks.get(3).and_then(Tok::keyword), word(4)) {
            (Some(from), Some(to_kw), Some(to)) if to_kw == "TO" && toks.len() == 5 => {
                Ok(vec![Step::RenameIndex { from, to }])
            }
            _ => Ok(vec![Step::Keep]),
        };
    }
    if ADDS_INDEX.iter().any(|p| starts(&p[..])) {
        return Ok(parse_clause(text).unwrap_or_else(|_| vec![Step::Keep]));
    }
    if CHARSET.iter().any(|p| starts(&p[..])) {
        return Ok(vec![Step::TableCharset]);
    }
    if KEEPS.iter().any(|p| starts(&p[..])) {
        return Ok(vec![Step::Keep]);
    }
    // `ALTER COLUMN c SET VISIBLE`: only the column's visibility changes.
    if starts(&["ALTER"][..])
        && toks
            .last()
            .and_then(Tok::keyword)
            .is_some_and(|w| w == "VISIBLE" || w == "INVISIBLE")
    {
        return Ok(vec![Step::Keep]);
    }
    // `ADD [COLUMN] (a INT, b INT)`: one ADD per column.
    let paren = usize::from(starts(&["ADD", "COLUMN"][..])) + 1;
    if starts(&["ADD"][..])
        && toks.get(paren).map(|t| &t.token) == Some(&Token::LParen)
        && toks.last().map(|t| &t.token) == Some(&Token::RParen)
    {
        let inner = toks.get(paren + 1).map_or(text.len(), |t| t.start);
        let base = toks[0].start;
        let body = text
            .get(inner - base..)
            .and_then(|b| b.trim_end().strip_suffix(')'))
            .unwrap_or("");
        return split_top_level(body)
            .iter()
            .map(|def| parse_clause(&format!("ADD COLUMN {def}")))
            .collect::<Result<Vec<_>, _>>()
            .map(|s| s.into_iter().flatten().collect());
    }
    parse_clause(text)
}

fn starts_with(words: &[String], prefix: &[&str]) -> bool {
    words.len() >= prefix.len() && prefix.iter().zip(words).all(|(a, b)| *a == b.as_str())
}

/// Splits at commas outside parentheses and quotes.
fn split_top_level(body: &str) -> Vec<String> {
    let Some(toks) = tokens(body) else {
        return vec![body.to_string()];
    };
    let mut out = Vec::new();
    let (mut depth, mut from) = (0i32, 0usize);
    for t in &toks {
        match t.token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            Token::Comma if depth == 0 => {
                out.push(body[from..t.start].trim().to_string());
                from = t.start + 1;
            }
            _ => {}
        }
    }
    out.push(body[from..].trim().to_string());
    out
}

/// One clause parsed as the only operation of an `ALTER TABLE`.
fn parse_clause(clause: &str) -> Result<Vec<Step>, String> {
    let sql = format!("ALTER TABLE t {clause}");
    match Parser::parse_sql(&MySqlDialect {}, &sql) {
        Ok(mut statements) if statements.len() == 1 => match statements.pop() {
            Some(Statement::AlterTable(a)) => Ok(a
                .operations
                .into_iter()
                .map(|op| Step::Op(Box::new(op)))
                .collect()),
            _ => Err(format!("could not parse {clause}")),
        },
        Ok(_) => Err(format!("could not parse {clause}")),
        Err(e) => Err(format!("could not parse {clause}: {e}")),
    }
}

/// A MariaDB/MySQL `CREATE [OR REPLACE] [ONLINE|OFFLINE] [UNIQUE|FULLTEXT|SPATIAL] INDEX ...`
/// as the parser reads it: `CREATE [UNIQUE] INDEX ...` (`OR REPLACE` is what adding an index
/// of a taken name does here anyway); `None` when the text is no `CREATE ... INDEX`.
pub fn create_index_text(text: &str) -> Option<String> {
    let toks = tokens(text)?;
    (toks.first()?.keyword()? == "CREATE").then_some(())?;
    let mut unique = false;
    for (i, t) in toks.iter().enumerate().skip(1) {
        match t.keyword()?.as_str() {
            "OR" | "REPLACE" | "ONLINE" | "OFFLINE" | "FULLTEXT" | "SPATIAL" => {}
            "UNIQUE" => unique = true,
            "INDEX" => {
                let rest = toks.get(i + 1).map_or("", |next| &text[next.start..]);
                let unique = if unique { "UNIQUE " } else { "" };
                return Some(format!("CREATE {unique}INDEX {rest}"));
            }
            _ => return None,
        }
    }
    None
}
