//! `COPY (query) TO STDOUT` and `COPY table TO STDOUT`: query results as `COPY` data, in text
//! or CSV format, with the options `psql`'s `\copy` sends (both the `WITH (...)` and the older
//! bare-word spelling). `COPY FROM` is refused with `0A000` (the tables are read-only) and
//! `COPY ... TO PROGRAM` with `42501`; `COPY ... TO 'file'` is DataFusion's to run, under the
//! engine's allowed locations (see [`file_target`]).

use std::sync::Arc;

use bytes::Bytes;
use pgwire::api::results::{CopyCsvOptions, CopyEncoder, CopyTextOptions, FieldInfo};
use pgwire::error::PgWireResult;
use pgwire::messages::copy::CopyData;
use sqlparser::ast::helpers::attached_token::AttachedToken;
use sqlparser::ast::{
    CopyLegacyCsvOption, CopyLegacyOption, CopyOption, CopySource, CopyTarget, Expr, GroupByExpr,
    Ident, ObjectName, Query, Select, SelectFlavor, SelectItem, SetExpr, Statement, TableFactor,
    TableWithJoins, WildcardAdditionalOptions,
};

use crate::frontend::protocol::error::user_error;
use crate::sqlstate::SqlState;

/// The file a `COPY ... TO 'file'` writes: such a statement is DataFusion's, read in its
/// grammar and run by the engine once the engine allows the location (see `statement`).
pub fn file_target(statement: &Statement) -> Option<&str> {
    match statement {
        Statement::Copy {
            to: true,
            target: CopyTarget::File { filename },
            ..
        } => Some(filename),
        _ => None,
    }
}

/// A `COPY ... TO STDOUT` to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyOut {
    /// The query whose rows are copied.
    pub query: Box<Query>,
    pub csv: bool,
    pub header: bool,
    pub delimiter: Option<char>,
    pub null: Option<String>,
}

impl CopyOut {
    /// The `COPY` that `statement` is; `Ok(None)` when it is no `COPY`.
    pub fn of(statement: &Statement) -> PgWireResult<Option<Self>> {
        let Statement::Copy {
            source,
            to,
            target,
            options,
            legacy_options,
            ..
        } = statement
        else {
            return Ok(None);
        };
        if !to {
            return Err(user_error(
                SqlState::FEATURE_NOT_SUPPORTED,
                "COPY FROM is not supported: cdcfusion's tables are read-only",
            ));
        }
        if *target != CopyTarget::Stdout {
            return Err(user_error(
                crate::engine::FileAccessDenied::SQLSTATE,
                "permission denied: COPY TO PROGRAM is not allowed; use COPY ... TO STDOUT (psql: \\copy)",
            ));
        }
        let query = match source {
            CopySource::Query(q) => q.clone(),
            CopySource::Table {
                table_name,
                columns,
            } => Box::new(select_from(table_name, columns)),
        };
        let mut copy = Self {
            query,
            csv: false,
            header: false,
            delimiter: None,
            null: None,
        };
        for option in options {
            match option {
                CopyOption::Format(f) if f.value.eq_ignore_ascii_case("csv") => copy.csv = true,
                CopyOption::Format(f) if f.value.eq_ignore_ascii_case("text") => copy.csv = false,
                CopyOption::Header(h) => copy.header = *h,
                CopyOption::Delimiter(d) => copy.delimiter = Some(*d),
                CopyOption::Null(n) => copy.null = Some(n.clone()),
                other => return Err(unsupported_option(other)),
            }
        }
        for option in legacy_options {
            match option {
                CopyLegacyOption::Csv(csv_options) => {
                    copy.csv = true;
                    for o in csv_options {
                        match o {
                            CopyLegacyCsvOption::Header => copy.header = true,
                            other => return Err(unsupported_option(other)),
                        }
                    }
                }
                CopyLegacyOption::Delimiter(d) => copy.delimiter = Some(*d),
                CopyLegacyOption::Null(n) => copy.null = Some(n.clone()),
                CopyLegacyOption::Header => copy.header = true,
                other => return Err(unsupported_option(other)),
            }
        }
        Ok(Some(copy))
    }

    /// The encoder of this copy's lines.
    pub fn encoder(&self, fields: Arc<Vec<FieldInfo>>) -> CopyEncoder {
        if self.csv {
            let mut options = CopyCsvOptions::default();
            if let Some(d) = self.delimiter {
                options.delimiter = d.to_string().as_str().into();
            }
            if let Some(n) = &self.null {
                options.null_string = n.as_str().into();
            }
            CopyEncoder::new_csv(fields, options)
        } else {
            let mut options = CopyTextOptions::default();
            if let Some(d) = self.delimiter {
                options.delimiter = d.to_string().as_str().into();
            }
            if let Some(n) = &self.null {
                options.null_string = n.as_str().into();
            }
            CopyEncoder::new_text(fields, options)
        }
    }

    /// The header line, when asked for (CSV only, as in PostgreSQL).
    pub fn header_line(&self, fields: &[FieldInfo]) -> Option<CopyData> {
        if !(self.header && self.csv) {
            return None;
        }
        let delimiter = self.delimiter.unwrap_or(',').to_string();
        let names: Vec<String> = fields
            .iter()
            .map(|f| {
                let name = f.name();
                if name.contains(['"', '\n', '\r']) || name.contains(delimiter.as_str()) {
                    format!("\"{}\"", name.replace('"', "\"\""))
                } else {
                    name.to_string()
                }
            })
            .collect();
        Some(CopyData::new(Bytes::from(format!(
            "{}\n",
            names.join(&delimiter)
        ))))
    }
}

/// `SELECT columns FROM table` (`*` for no columns), the query `COPY table TO STDOUT` copies.
fn select_from(table: &ObjectName, columns: &[Ident]) -> Query {
    let projection = if columns.is_empty() {
        vec![SelectItem::Wildcard(WildcardAdditionalOptions::default())]
    } else {
        columns
            .iter()
            .map(|c| SelectItem::UnnamedExpr(Expr::Identifier(c.clone())))
            .collect()
    };
    let relation = TableFactor::Table {
        name: table.clone(),
        alias: None,
        args: None,
        with_hints: Vec::new(),
        version: None,
        with_ordinality: false,
        partitions: Vec::new(),
        json_path: None,
        sample: None,
        index_hints: Vec::new(),
    };
    let select = Select {
        select_token: AttachedToken::empty(),
        optimizer_hints: Vec::new(),
        distinct: None,
        select_modifiers: None,
        top: None,
        top_before_distinct: false,
        projection,
        exclude: None,
        into: None,
        from: vec![TableWithJoins {
            relation,
            joins: Vec::new(),
        }],
        lateral_views: Vec::new(),
        prewhere: None,
        selection: None,
        connect_by: Vec::new(),
        group_by: GroupByExpr::Expressions(Vec::new(), Vec::new()),
        cluster_by: Vec::new(),
        distribute_by: Vec::new(),
        sort_by: Vec::new(),
        having: None,
        named_window: Vec::new(),
        qualify: None,
        window_before_qualify: false,
        value_table_mode: None,
        flavor: SelectFlavor::Standard,
    };
    Query {
        with: None,
        body: Box::new(SetExpr::Select(Box::new(select))),
        order_by: None,
        limit_clause: None,
        fetch: None,
        locks: Vec::new(),
        for_clause: None,
        settings: None,
        format_clause: None,
        pipe_operators: Vec::new(),
    }
}

fn unsupported_option(option: &impl std::fmt::Display) -> pgwire::error::PgWireError {
    user_error(
        SqlState::FEATURE_NOT_SUPPORTED,
        format!("COPY option {option} is not supported"),
    )
}

/// The data lines of a `COPY` with the header line (if any) in front of the first one.
///
/// The header shares the first row's `CopyData` message because pgwire reports one row per
/// message in the `COPY n` tag, and the header is not a row. With no rows the header goes
/// alone, and the tag says `COPY 1` where PostgreSQL says `COPY 0`.
pub fn with_header<S>(
    header: Option<CopyData>,
    lines: S,
) -> impl futures::Stream<Item = pgwire::error::PgWireResult<CopyData>> + Send
where
    S: futures::Stream<Item = pgwire::error::PgWireResult<CopyData>> + Send,
{
    use futures::StreamExt;
    let pending = std::sync::Arc::new(std::sync::Mutex::new(header));
    let unsent = std::sync::Arc::clone(&pending);
    let merged = lines.map(move |line| {
        let header = pending.lock().expect("copy header").take();
        match (header, line) {
            (Some(header), Ok(line)) => {
                let mut data = bytes::BytesMut::with_capacity(header.data.len() + line.data.len());
                data.extend_from_slice(&header.data);
                data.extend_from_slice(&line.data);
                Ok(CopyData::new(data.freeze()))
            }
            (_, line) => line,
        }
    });
    let rest = futures::stream::once(async move { unsent.lock().expect("copy header").take() })
        .filter_map(|header| async move { header.map(Ok) });
    merged.chain(rest)
}
