//! Session statements clients send on their own (`SET`, `SHOW`, `RESET`, `BEGIN`/`COMMIT`/
//! `ROLLBACK`, savepoints, `DISCARD ALL`, `DEALLOCATE`) and the session functions that read
//! settings (`current_setting`, `version()`, `current_database()`).
//!
//! # Settings
//! A session's settings live in the connection's metadata (the startup parameters, names in
//! lower case), where pgwire also reads the output formats (`datestyle`, `intervalstyle`,
//! `bytea_output`, `extra_float_digits`). Settings not given at start-up have the defaults of
//! [`DEFAULTS`]. Only names PostgreSQL clients use are accepted (plus `prefix.name` custom
//! settings, as in PostgreSQL); any other is `42704`, and a bad value of a setting we act on
//! (`statement_timeout`, `TimeZone`) is `22023`.
//!
//! # Transactions
//! Data is read-only and every statement reads its own pinned version, so transaction
//! statements (savepoints included) only move the state of the connection's transaction
//! block, which `block` keeps with PostgreSQL's rules and errors: an error inside a block
//! makes it refuse other statements (`25P02`) until its end or a `ROLLBACK TO` one of its
//! savepoints.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{ArrayRef, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{create_udf, ColumnarValue, ScalarUDF, Volatility};
use sqlparser::ast::{Expr, Ident, ObjectName, Reset, Set, Statement, Value};

use crate::frontend::protocol::error::user_error;
use crate::sqlstate::SqlState;
use pgwire::error::PgWireResult;

/// The PostgreSQL version we answer as: clients pick their catalog queries by it.
pub const SERVER_VERSION: &str = "16.6";
/// `version()`.
pub fn version_string() -> String {
    format!(
        "PostgreSQL {SERVER_VERSION} (cdcfusion {}, Apache DataFusion) on {}-linux, 64-bit",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH
    )
}

/// The session setting that lets queries read tables whose capture stopped.
pub const STALE_READS: &str = "cdcfusion.stale_reads";

/// Whether the session reads stale state of stopped tables (`SET cdcfusion.stale_reads = on`).
pub fn stale_reads(metadata: &HashMap<String, String>) -> bool {
    get(metadata, STALE_READS)
        .and_then(|v| crate::provider::health::parse_bool(&v))
        .unwrap_or(false)
}

/// The session setting that answers primary-key point lookups from the key index without
/// planning them (`lookup`); `off` plans every statement.
pub const POINT_LOOKUPS: &str = "cdcfusion.point_lookups";

/// Whether the session answers point lookups from the key index (on unless set off).
pub fn point_lookups(metadata: &HashMap<String, String>) -> bool {
    get(metadata, POINT_LOOKUPS)
        .and_then(|v| crate::provider::health::parse_bool(&v))
        .unwrap_or(true)
}

/// The session setting that answers filters on a secondary index's first column from the
/// index (`provider::current`); `off` scans and filters instead (the same rows).
pub const INDEXES: &str = "cdcfusion.indexes";

/// Whether the session's queries use secondary indexes (on unless set off).
pub fn indexes(metadata: &HashMap<String, String>) -> bool {
    get(metadata, INDEXES)
        .and_then(|v| crate::provider::health::parse_bool(&v))
        .unwrap_or(true)
}

/// Settings every session has, with their defaults.
pub const DEFAULTS: &[(&str, &str)] = &[
    ("application_name", ""),
    ("bytea_output", "hex"),
    // Serve the last state of tables whose capture stopped, with a warning (`provider::health`).
    (STALE_READS, "off"),
    (POINT_LOOKUPS, "on"),
    (INDEXES, "on"),
    ("client_encoding", "UTF8"),
    ("client_min_messages", "notice"),
    ("datestyle", "ISO, MDY"),
    ("default_transaction_isolation", "read committed"),
    ("default_transaction_read_only", "on"),
    ("extra_float_digits", "1"),
    ("idle_in_transaction_session_timeout", "0"),
    ("integer_datetimes", "on"),
    ("intervalstyle", "postgres"),
    ("is_superuser", "off"),
    ("lc_messages", "C"),
    ("lc_monetary", "C"),
    ("lc_numeric", "C"),
    ("lc_time", "C"),
    ("lock_timeout", "0"),
    ("max_identifier_length", "63"),
    ("search_path", "\"$user\", public"),
    ("server_encoding", "UTF8"),
    ("server_version", SERVER_VERSION),
    ("server_version_num", "160006"),
    ("standard_conforming_strings", "on"),
    ("statement_timeout", "0"),
    ("timezone", "UTC"),
    ("transaction_isolation", "read committed"),
    ("transaction_read_only", "on"),
];

/// Settings drivers and tools send that we accept and only store.
const ACCEPTED: &[&str] = &[
    "geqo",
    "jit",
    "join_collapse_limit",
    "role",
    "row_security",
    "search_path",
    "session_replication_role",
    "synchronize_seqscans",
    "work_mem",
];

/// A statement about the session rather than the data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionStatement {
    /// `SET name = value`; `None` is `DEFAULT`.
    Set {
        name: String,
        value: Option<String>,
    },
    /// `RESET name`; `None` is `RESET ALL`.
    Reset(Option<String>),
    /// `SHOW name`; `None` is `SHOW ALL`.
    Show(Option<String>),
    Begin,
    Commit,
    Rollback,
    /// `SAVEPOINT name` (names as PostgreSQL folds them).
    Savepoint(String),
    /// `RELEASE [SAVEPOINT] name`.
    Release(String),
    /// `ROLLBACK TO [SAVEPOINT] name`.
    RollbackTo(String),
    DiscardAll,
    /// `DEALLOCATE name`; `None` is `DEALLOCATE ALL`.
    Deallocate(Option<String>),
    /// Accepted and without effect on read-only data (`SET TRANSACTION ...`, `SET ROLE`, ...).
    Ignored(&'static str),
}

impl SessionStatement {
    /// The session statement `statement` is, if it is one.
    pub fn of(statement: &Statement) -> Option<Self> {
        Some(match statement {
            Statement::Set(set) => match set {
                Set::SingleAssignment {
                    variable, values, ..
                } => Self::Set {
                    name: setting_name(variable),
                    value: set_value(values),
                },
                Set::SetTimeZone { value, .. } => Self::Set {
                    name: "timezone".into(),
                    value: set_value(std::slice::from_ref(value)),
                },
                Set::SetNames { charset_name, .. } => Self::Set {
                    name: "client_encoding".into(),
                    value: Some(charset_name.value.clone()),
                },
                _ => Self::Ignored("SET"),
            },
            Statement::Reset(reset) => match &reset.reset {
                Reset::ALL => Self::Reset(None),
                Reset::ConfigurationParameter(name) => Self::Reset(Some(setting_name(name))),
            },
            Statement::ShowVariable { variable } => {
                let name = variable
                    .iter()
                    .map(|i| i.value.to_lowercase())
                    .collect::<Vec<_>>()
                    .join(" ");
                match name.as_str() {
                    "all" => Self::Show(None),
                    "time zone" => Self::Show(Some("timezone".into())),
                    "transaction isolation level" => {
                        Self::Show(Some("transaction_isolation".into()))
                    }
                    // The parser drops the dot of a custom setting (`SHOW prefix.name`).
                    _ if variable.len() == 2 => Self::Show(Some(name.replace(' ', "."))),
                    _ => Self::Show(Some(name)),
                }
            }
            Statement::StartTransaction { .. } => Self::Begin,
            Statement::Commit { .. } => Self::Commit,
            Statement::Rollback {
                savepoint: Some(name),
                ..
            } => Self::RollbackTo(identifier(name)),
            Statement::Rollback { .. } => Self::Rollback,
            Statement::Savepoint { name } => Self::Savepoint(identifier(name)),
            Statement::ReleaseSavepoint { name } => Self::Release(identifier(name)),
            Statement::Discard { .. } => Self::DiscardAll,
            Statement::Deallocate { name, .. } => Self::Deallocate(
                Some(name.value.clone()).filter(|n| !n.eq_ignore_ascii_case("all")),
            ),
            _ => return None,
        })
    }

    /// The command tag PostgreSQL answers with.
    pub fn tag(&self) -> &'static str {
        match self {
            Self::Set { .. } | Self::Ignored(_) => "SET",
            Self::Reset(_) => "RESET",
            Self::Show(_) => "SHOW",
            Self::Begin => "BEGIN",
            Self::Commit => "COMMIT",
            Self::Rollback | Self::RollbackTo(_) => "ROLLBACK",
            Self::Savepoint(_) => "SAVEPOINT",
            Self::Release(_) => "RELEASE",
            Self::DiscardAll => "DISCARD ALL",
            Self::Deallocate(_) => "DEALLOCATE",
        }
    }
}

/// An identifier as PostgreSQL reads it: folded to lower case unless quoted.
fn identifier(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

fn setting_name(name: &ObjectName) -> String {
    name.to_string().to_lowercase()
}

/// The text of a `SET` value list, `None` for `DEFAULT`.
fn set_value(values: &[Expr]) -> Option<String> {
    let parts: Vec<String> = values
        .iter()
        .map(|v| match v {
            Expr::Value(v) => match &v.value {
                Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
                other => other.to_string(),
            },
            Expr::Identifier(i) => i.value.clone(),
            other => other.to_string(),
        })
        .collect();
    if parts.len() == 1 && parts[0].eq_ignore_ascii_case("default") {
        return None;
    }
    Some(parts.join(", "))
}

/// Whether `name` is a setting a client may set.
pub fn is_known(name: &str) -> bool {
    DEFAULTS.iter().any(|(n, _)| *n == name) || ACCEPTED.contains(&name) || name.contains('.')
}

/// The value of setting `name` in `metadata`, or its default.
pub fn get(metadata: &HashMap<String, String>, name: &str) -> Option<String> {
    metadata.get(name).cloned().or_else(|| {
        DEFAULTS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string())
    })
}

/// Checks `value` for `name` and stores it (or the default for `None`).
pub fn set(
    metadata: &mut HashMap<String, String>,
    name: &str,
    value: Option<String>,
) -> PgWireResult<()> {
    if !is_known(name) {
        return Err(unknown(name));
    }
    match value {
        None => {
            metadata.remove(name);
        }
        Some(value) => {
            let value = if name == "timezone" {
                valid_time_zone(&value).ok_or_else(|| {
                    user_error(
                        SqlState::INVALID_PARAMETER_VALUE,
                        format!("invalid value for parameter \"TimeZone\": \"{value}\""),
                    )
                })?
            } else {
                value
            };
            if (name == STALE_READS || name == POINT_LOOKUPS)
                && crate::provider::health::parse_bool(&value).is_none()
            {
                return Err(user_error(
                    SqlState::INVALID_PARAMETER_VALUE,
                    format!("parameter \"{name}\" requires a Boolean value, not \"{value}\""),
                ));
            }
            if name == "statement_timeout" {
                parse_duration_ms(&value).ok_or_else(|| {
                    user_error(
                        SqlState::INVALID_PARAMETER_VALUE,
                        format!("invalid value for parameter \"statement_timeout\": \"{value}\""),
                    )
                })?;
            }
            metadata.insert(name.to_string(), value);
        }
    }
    Ok(())
}

/// `zone` as Arrow names it, if it is a time zone: an IANA name (`Europe/Paris`, `UTC` in any
/// case) or an offset (`+05:45`).
fn valid_time_zone(zone: &str) -> Option<String> {
    use datafusion::arrow::array::timezone::Tz;
    let zone = if zone.eq_ignore_ascii_case("utc") || zone.eq_ignore_ascii_case("gmt") {
        "UTC"
    } else {
        zone
    };
    zone.parse::<Tz>().ok().map(|_| zone.to_string())
}

/// The session's time zone for `timestamptz` values, when it is a valid one other than UTC.
pub fn time_zone(metadata: &HashMap<String, String>) -> Option<Arc<str>> {
    metadata
        .get("timezone")
        .and_then(|z| valid_time_zone(z))
        .filter(|z| z != "UTC")
        .map(Arc::from)
}

/// `42704` for a setting that does not exist.
pub fn unknown(name: &str) -> pgwire::error::PgWireError {
    user_error(
        SqlState::UNDEFINED_OBJECT,
        format!("unrecognized configuration parameter \"{name}\""),
    )
}

/// The session's statement timeout; `None` when it is 0.
pub fn statement_timeout(metadata: &HashMap<String, String>) -> Option<Duration> {
    get(metadata, "statement_timeout")
        .and_then(|v| parse_duration_ms(&v))
        .filter(|&ms| ms > 0)
        .map(Duration::from_millis)
}

/// A PostgreSQL time setting in milliseconds: `500`, `500ms`, `5s`, `2min`, `1h`.
fn parse_duration_ms(value: &str) -> Option<u64> {
    let value = value.trim();
    let split = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (number, unit) = value.split_at(split);
    let number: u64 = number.parse().ok()?;
    let factor = match unit.trim() {
        "" | "ms" => 1,
        "s" => 1000,
        "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    number.checked_mul(factor)
}

/// Every setting with its value, for `SHOW ALL` and `current_setting`.
pub fn all(metadata: &HashMap<String, String>) -> Vec<(String, String)> {
    let mut names: Vec<String> = DEFAULTS.iter().map(|(n, _)| n.to_string()).collect();
    names.extend(metadata.keys().filter(|k| is_known(k)).cloned());
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter_map(|n| get(metadata, &n).map(|v| (n, v)))
        .collect()
}

/// `current_setting(name)` over a snapshot of the session's settings.
pub fn current_setting_udf(settings: HashMap<String, String>) -> ScalarUDF {
    let settings = Arc::new(settings);
    let lookup = move |name: &str| -> Result<String, DataFusionError> {
        settings.get(&name.to_lowercase()).cloned().ok_or_else(|| {
            DataFusionError::Execution(format!("unrecognized configuration parameter \"{name}\""))
        })
    };
    create_udf(
        "current_setting",
        vec![DataType::Utf8],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(move |args: &[ColumnarValue]| match &args[0] {
            ColumnarValue::Scalar(ScalarValue::Utf8(Some(name))) => Ok(ColumnarValue::Scalar(
                ScalarValue::Utf8(Some(lookup(name)?)),
            )),
            ColumnarValue::Scalar(_) => Ok(ColumnarValue::Scalar(ScalarValue::Utf8(None))),
            ColumnarValue::Array(names) => {
                let names = names
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .ok_or_else(|| DataFusionError::Execution("current_setting(text)".into()))?;
                let values = names
                    .iter()
                    .map(|n| n.map(&lookup).transpose())
                    .collect::<Result<StringArray, _>>()?;
                Ok(ColumnarValue::Array(Arc::new(values) as ArrayRef))
            }
        }),
    )
}

/// `version()`, answering as PostgreSQL (tools parse it).
pub fn version_udf() -> ScalarUDF {
    let version = version_string();
    create_udf(
        "version",
        vec![],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(move |_| {
            Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
                version.clone(),
            ))))
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;

    fn of(sql: &str) -> Option<SessionStatement> {
        let statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap();
        SessionStatement::of(&statements[0])
    }

    #[test]
    fn session_statements_are_recognised() {
        assert_eq!(
            of("SET statement_timeout = 100"),
            Some(SessionStatement::Set {
                name: "statement_timeout".into(),
                value: Some("100".into())
            })
        );
        assert_eq!(
            of("SET search_path TO DEFAULT"),
            Some(SessionStatement::Set {
                name: "search_path".into(),
                value: None
            })
        );
        assert_eq!(
            of("SET TIME ZONE 'Europe/Paris'"),
            Some(SessionStatement::Set {
                name: "timezone".into(),
                value: Some("Europe/Paris".into())
            })
        );
        assert_eq!(of("SHOW ALL"), Some(SessionStatement::Show(None)));
        assert_eq!(
            of("SHOW TRANSACTION ISOLATION LEVEL"),
            Some(SessionStatement::Show(Some("transaction_isolation".into())))
        );
        assert_eq!(of("BEGIN"), Some(SessionStatement::Begin));
        assert_eq!(
            of("START TRANSACTION READ ONLY"),
            Some(SessionStatement::Begin)
        );
        assert_eq!(of("COMMIT"), Some(SessionStatement::Commit));
        assert_eq!(of("ROLLBACK"), Some(SessionStatement::Rollback));
        assert_eq!(
            of("SAVEPOINT Sa_1"),
            Some(SessionStatement::Savepoint("sa_1".into()))
        );
        assert_eq!(
            of("RELEASE SAVEPOINT \"Sa_1\""),
            Some(SessionStatement::Release("Sa_1".into()))
        );
        assert_eq!(of("RELEASE x"), Some(SessionStatement::Release("x".into())));
        assert_eq!(
            of("ROLLBACK TO SAVEPOINT x"),
            Some(SessionStatement::RollbackTo("x".into()))
        );
        assert_eq!(
            of("ROLLBACK TO x"),
            Some(SessionStatement::RollbackTo("x".into()))
        );
        assert_eq!(of("DISCARD ALL"), Some(SessionStatement::DiscardAll));
        assert_eq!(
            of("DEALLOCATE ALL"),
            Some(SessionStatement::Deallocate(None))
        );
        assert_eq!(of("RESET ALL"), Some(SessionStatement::Reset(None)));
        assert_eq!(of("SELECT 1"), None);
    }

    #[test]
    fn settings_are_checked() {
        let mut metadata = HashMap::new();
        set(&mut metadata, "statement_timeout", Some("2s".into())).unwrap();
        assert_eq!(statement_timeout(&metadata), Some(Duration::from_secs(2)));
        let bad = set(&mut metadata, "statement_timeout", Some("soon".into())).unwrap_err();
        assert!(bad.to_string().contains("statement_timeout"), "{bad}");
        assert!(set(&mut metadata, "no_such_setting", Some("1".into())).is_err());
        set(&mut metadata, "myapp.flag", Some("on".into())).unwrap();
        set(&mut metadata, "statement_timeout", None).unwrap();
        assert_eq!(statement_timeout(&metadata), None);
        assert_eq!(
            get(&metadata, "server_version").as_deref(),
            Some(SERVER_VERSION)
        );
    }
}
