//! What drivers and ORMs send to reflect a database, beyond what psql needs (`rules`):
//! psycopg's type lookups (`to_regtype`) and SQLAlchemy's inspector queries: `LIKE ... ESCAPE`
//! with an escape character other than backslash (the only one DataFusion knows),
//! `generate_subscripts` beside `unnest` over `pg_index` and `pg_constraint`, and the
//! subqueries of its column query (see `subqueries`).
//!
//! # Invariant
//! Answers are PostgreSQL's for the catalog cdcfusion has: `to_regtype` names the oid of a type
//! listed in `pg_type` (or NULL, as PostgreSQL does for an unknown name); `like_escape` turns a
//! pattern into the backslash-escaped pattern that matches the same strings; a subscript
//! series has the bounds PostgreSQL gives the array it walks (vector columns such as
//! `pg_index.indkey` count from 0, other arrays from 1; arrays here have one dimension).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, Int32Array, RecordBatch, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int32Type};
use datafusion::common::{plan_err, ScalarValue};
use datafusion::error::Result;
use datafusion::logical_expr::{
    create_udf, ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::SessionContext;
use sqlparser::ast::{
    Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments, Ident,
    ObjectName, Value,
};

/// Registers the functions of this module; `pg_type` is the catalog's list of types.
pub fn install(ctx: &SessionContext, pg_type: &[RecordBatch]) -> Result<()> {
    ctx.register_udf(ScalarUDF::new_from_impl(ToRegtype::new(pg_type)?));
    ctx.register_udf(create_udf(
        "like_escape",
        vec![DataType::Utf8, DataType::Utf8],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(like_escape_fn),
    ));
    ctx.register_udf(ScalarUDF::new_from_impl(
        crate::frontend::pg_compat::composite::ExpandArrayItems::new(),
    ));
    ctx.register_udf(ScalarUDF::new_from_impl(JsonBuildObject {
        signature: Signature::variadic_any(Volatility::Stable),
    }));
    Ok(())
}

/// Rewrites one expression, if it is one this module handles.
pub fn rewrite(expr: &Expr) -> Option<Expr> {
    subscripts(expr)
        .or_else(|| escaped_like(expr))
        .or_else(|| crate::frontend::pg_compat::subqueries::rewrite(expr))
}

/// `x [NOT] [I]LIKE p ESCAPE 'c'` with `c` other than backslash becomes
/// `x [NOT] [I]LIKE like_escape(p, 'c')`.
fn escaped_like(expr: &Expr) -> Option<Expr> {
    let (Expr::Like {
        negated,
        any: false,
        expr: value,
        pattern,
        escape_char: Some(escape),
    }
    | Expr::ILike {
        negated,
        any: false,
        expr: value,
        pattern,
        escape_char: Some(escape),
    }) = expr
    else {
        return None;
    };
    let Value::SingleQuotedString(c) = &escape.value else {
        return None;
    };
    if c == "\\" {
        return None;
    }
    let function = Function {
        name: ObjectName::from(vec![Ident::new("like_escape")]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: [pattern.as_ref().clone(), Expr::Value(escape.clone())]
                .into_iter()
                .map(|e| FunctionArg::Unnamed(FunctionArgExpr::Expr(e)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    };
    let pattern = Box::new(Expr::Function(function));
    let (negated, value) = (*negated, value.clone());
    Some(match expr {
        Expr::Like { .. } => Expr::Like {
            negated,
            any: false,
            expr: value,
            pattern,
            escape_char: None,
        },
        _ => Expr::ILike {
            negated,
            any: false,
            expr: value,
            pattern,
            escape_char: None,
        },
    })
}

/// `like_escape(pattern, escape)`: `pattern` written with backslash as its escape character.
fn like_escape(pattern: &str, escape: &str) -> Result<String> {
    let mut escapes = escape.chars();
    let (Some(escape), None) = (escapes.next(), escapes.next()) else {
        return plan_err!("invalid escape string");
    };
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c == escape {
            let Some(next) = chars.next() else {
                return plan_err!("LIKE pattern must not end with escape character");
            };
            out.push('\\');
            out.push(next);
        } else if c == '\\' {
            out.push_str("\\\\");
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

fn like_escape_fn(args: &[ColumnarValue]) -> Result<ColumnarValue> {
    let arrays = ColumnarValue::values_to_arrays(args)?;
    let patterns = cast(&arrays[0], &DataType::Utf8)?;
    let escapes = cast(&arrays[1], &DataType::Utf8)?;
    let out: StringArray = patterns
        .as_string::<i32>()
        .iter()
        .zip(escapes.as_string::<i32>().iter())
        .map(|(p, e)| match (p, e) {
            (Some(p), Some(e)) => like_escape(p, e).map(Some),
            _ => Ok(None),
        })
        .collect::<Result<_>>()?;
    let scalar = args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_)));
    Ok(if scalar {
        ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
    } else {
        ColumnarValue::Array(Arc::new(out))
    })
}

/// SQL's names of types whose `pg_type` name differs.
const ALIASES: [(&str, &str); 16] = [
    ("integer", "int4"),
    ("int", "int4"),
    ("smallint", "int2"),
    ("bigint", "int8"),
    ("real", "float4"),
    ("double precision", "float8"),
    ("float", "float8"),
    ("boolean", "bool"),
    ("decimal", "numeric"),
    ("character varying", "varchar"),
    ("character", "bpchar"),
    ("char", "bpchar"),
    ("timestamp without time zone", "timestamp"),
    ("timestamp with time zone", "timestamptz"),
    ("time without time zone", "time"),
    ("time with time zone", "timetz"),
];

/// `to_regtype(text)`: the oid of the type a name means, NULL when there is none.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ToRegtype {
    signature: Signature,
    /// `(typname, oid, oid of its array type)`.
    types: Vec<(String, i32, i32)>,
}

impl ToRegtype {
    fn new(pg_type: &[RecordBatch]) -> Result<Self> {
        let mut types = Vec::new();
        for batch in pg_type {
            let column = |name: &str, to: &DataType| -> Result<ArrayRef> {
                let array = batch.column_by_name(name).ok_or_else(|| {
                    datafusion::error::DataFusionError::Internal(format!("pg_type.{name}"))
                })?;
                Ok(cast(array, to)?)
            };
            let names = column("typname", &DataType::Utf8)?;
            let oids = column("oid", &DataType::Int32)?;
            let arrays = column("typarray", &DataType::Int32)?;
            let (names, oids, arrays) = (
                names.as_string::<i32>(),
                oids.as_primitive::<Int32Type>(),
                arrays.as_primitive::<Int32Type>(),
            );
            for i in 0..batch.num_rows() {
                types.push((names.value(i).to_string(), oids.value(i), arrays.value(i)));
            }
        }
        Ok(Self {
            signature: Signature::exact(vec![DataType::Utf8], Volatility::Stable),
            types,
        })
    }

    fn oid(&self, name: &str) -> Option<i32> {
        let name = name.trim();
        if let Some(element) = name.strip_suffix("[]") {
            let element = self.oid(element)?;
            return self
                .types
                .iter()
                .find(|(_, oid, array)| *oid == element && *array != 0)
                .map(|(_, _, array)| *array);
        }
        let name = match name.strip_prefix('"').and_then(|n| n.strip_suffix('"')) {
            Some(quoted) => quoted.to_string(),
            None => name.to_lowercase(),
        };
        let name = name.strip_prefix("pg_catalog.").unwrap_or(&name);
        let name = ALIASES
            .iter()
            .find(|(alias, _)| *alias == name)
            .map_or(name, |(_, typname)| typname);
        self.types
            .iter()
            .find(|(typname, _, _)| typname == name)
            .map(|(_, oid, _)| *oid)
    }
}

impl ScalarUDFImpl for ToRegtype {
    fn name(&self) -> &str {
        "to_regtype"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int32)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        match &args.args[0] {
            ColumnarValue::Scalar(value) => {
                let name = match value {
                    ScalarValue::Utf8(name) | ScalarValue::LargeUtf8(name) => name.clone(),
                    _ => None,
                };
                Ok(ColumnarValue::Scalar(ScalarValue::Int32(
                    name.and_then(|n| self.oid(&n)),
                )))
            }
            ColumnarValue::Array(names) => {
                let names = cast(names, &DataType::Utf8)?;
                let oids: Int32Array = names
                    .as_string::<i32>()
                    .iter()
                    .map(|n| n.and_then(|n| self.oid(n)))
                    .collect();
                Ok(ColumnarValue::Array(Arc::new(oids) as ArrayRef))
            }
        }
    }
}

/// `json_build_object(key, value, ...)`: a JSON object as text (SQLAlchemy asks for identity
/// and collation details with it).
#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonBuildObject {
    signature: Signature,
}

impl ScalarUDFImpl for JsonBuildObject {
    fn name(&self) -> &str {
        "json_build_object"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if !args.args.len().is_multiple_of(2) {
            return plan_err!("argument list must have even number of elements");
        }
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let rows = (0..args.number_rows)
            .map(|row| {
                let mut object = serde_json::Map::new();
                for pair in arrays.chunks(2) {
                    let key = ScalarValue::try_from_array(&pair[0], row)?;
                    if key.is_null() {
                        return plan_err!("null value not allowed for object key");
                    }
                    let value = ScalarValue::try_from_array(&pair[1], row)?;
                    object.insert(text_of(&key), json_of(&value));
                }
                Ok(Some(serde_json::Value::Object(object).to_string()))
            })
            .collect::<Result<StringArray>>()?;
        Ok(ColumnarValue::Array(Arc::new(rows)))
    }
}

fn text_of(value: &ScalarValue) -> String {
    match value {
        ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) => s.clone(),
        ScalarValue::Utf8View(Some(s)) => s.clone(),
        other => other.to_string(),
    }
}

fn json_of(value: &ScalarValue) -> serde_json::Value {
    use serde_json::Value as J;
    if value.is_null() {
        return J::Null;
    }
    match value {
        ScalarValue::Boolean(Some(b)) => J::Bool(*b),
        ScalarValue::Int8(Some(v)) => J::from(*v),
        ScalarValue::Int16(Some(v)) => J::from(*v),
        ScalarValue::Int32(Some(v)) => J::from(*v),
        ScalarValue::Int64(Some(v)) => J::from(*v),
        ScalarValue::UInt8(Some(v)) => J::from(*v),
        ScalarValue::UInt16(Some(v)) => J::from(*v),
        ScalarValue::UInt32(Some(v)) => J::from(*v),
        ScalarValue::UInt64(Some(v)) => J::from(*v),
        ScalarValue::Float32(Some(v)) => J::from(*v),
        ScalarValue::Float64(Some(v)) => J::from(*v),
        other => J::String(text_of(other)),
    }
}

/// PostgreSQL's vector columns (`int2vector`, `oidvector`), whose subscripts start at 0.
const VECTOR_COLUMNS: [&str; 5] = ["indkey", "indclass", "indcollation", "indoption", "stxkeys"];

/// `generate_subscripts(a, d)` as a series DataFusion can unnest beside `unnest(a)`:
/// `unnest(range(lower, lower + array_length(a, d)))`, with PostgreSQL's lower bound.
fn subscripts(expr: &Expr) -> Option<Expr> {
    let Expr::Function(f) = expr else {
        return None;
    };
    let name = f.name.0.last()?.as_ident()?;
    if !name.value.eq_ignore_ascii_case("generate_subscripts") {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    let [FunctionArg::Unnamed(FunctionArgExpr::Expr(array)), FunctionArg::Unnamed(FunctionArgExpr::Expr(dim))] =
        list.args.as_slice()
    else {
        return None;
    };
    let column = match array {
        Expr::Identifier(i) => Some(i),
        Expr::CompoundIdentifier(parts) => parts.last(),
        _ => None,
    };
    let lower = match column {
        Some(c) if VECTOR_COLUMNS.contains(&c.value.to_ascii_lowercase().as_str()) => 0,
        _ => 1,
    };
    let sql =
        format!("unnest(range({lower}, {lower} + CAST(array_length({array}, {dim}) AS BIGINT)))");
    sqlparser::parser::Parser::new(&sqlparser::dialect::PostgreSqlDialect {})
        .try_with_sql(&sql)
        .and_then(|mut p| p.parse_expr())
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(types: &[(&str, i32, i32)], name: &str) -> Option<i32> {
        let udf = ToRegtype {
            signature: Signature::exact(vec![DataType::Utf8], Volatility::Stable),
            types: types
                .iter()
                .map(|(n, o, a)| (n.to_string(), *o, *a))
                .collect(),
        };
        udf.oid(name)
    }

    const TYPES: [(&str, i32, i32); 3] =
        [("int4", 23, 1007), ("text", 25, 1009), ("_int4", 1007, 0)];

    #[test]
    fn type_names_resolve_as_in_postgresql() {
        assert_eq!(lookup(&TYPES, "int4"), Some(23));
        assert_eq!(lookup(&TYPES, "Integer"), Some(23));
        assert_eq!(lookup(&TYPES, "pg_catalog.text"), Some(25));
        assert_eq!(lookup(&TYPES, "integer[]"), Some(1007));
        assert_eq!(lookup(&TYPES, "\"Text\""), None);
        assert_eq!(lookup(&TYPES, "hstore"), None);
    }

    fn rewritten(sql: &str) -> String {
        rewrite(&crate::frontend::pg_compat::pg_expr(sql)).map_or(String::new(), |e| e.to_string())
    }

    #[test]
    fn subscripts_start_where_postgresql_starts_them() {
        assert_eq!(
            rewritten("generate_subscripts(pg_catalog.pg_index.indkey, 1)"),
            "unnest(range(0, 0 + CAST(array_length(pg_catalog.pg_index.indkey, 1) AS BIGINT)))"
        );
        assert_eq!(
            rewritten("generate_subscripts(conkey, 1)"),
            "unnest(range(1, 1 + CAST(array_length(conkey, 1) AS BIGINT)))"
        );
        assert_eq!(
            rewritten("generate_subscripts(conkey, $1::INTEGER)"),
            "unnest(range(1, 1 + CAST(array_length(conkey, $1::INTEGER) AS BIGINT)))"
        );
        assert_eq!(rewritten("unnest(conkey)"), "");
        assert_eq!(
            rewritten("n NOT LIKE $1::VARCHAR || '%' ESCAPE '/'"),
            "n NOT LIKE like_escape($1::VARCHAR || '%', '/')"
        );
        assert_eq!(rewritten("n LIKE 'a\\_%' ESCAPE '\\'"), "");
    }

    #[test]
    fn objects_are_built_from_pairs() {
        let udf = JsonBuildObject {
            signature: Signature::variadic_any(Volatility::Stable),
        };
        let scalar = |v: ScalarValue| ColumnarValue::Scalar(v);
        let args = vec![
            scalar(ScalarValue::Utf8(Some("always".into()))),
            scalar(ScalarValue::Boolean(Some(true))),
            scalar(ScalarValue::Utf8(Some("start".into()))),
            scalar(ScalarValue::Int64(None)),
        ];
        let fields = args
            .iter()
            .map(|a| {
                Arc::new(datafusion::arrow::datatypes::Field::new(
                    "a",
                    a.data_type(),
                    true,
                ))
            })
            .collect();
        let out = udf
            .invoke_with_args(ScalarFunctionArgs {
                args,
                arg_fields: fields,
                number_rows: 1,
                return_field: Arc::new(datafusion::arrow::datatypes::Field::new(
                    "r",
                    DataType::Utf8,
                    true,
                )),
                config_options: Arc::default(),
            })
            .unwrap();
        let ColumnarValue::Array(out) = out else {
            panic!("an array");
        };
        assert_eq!(
            out.as_string::<i32>().value(0),
            r#"{"always":true,"start":null}"#
        );
    }

    #[test]
    fn escaped_patterns_match_the_same_strings() {
        assert_eq!(like_escape("pg/_%", "/").unwrap(), "pg\\_%");
        assert_eq!(like_escape("a\\b//c", "/").unwrap(), "a\\\\b\\/c");
        assert!(like_escape("ab/", "/").is_err());
    }
}
