//! The catalog functions psql's meta-commands call that `datafusion-pg-catalog` does not
//! register.
//!
//! # Invariant
//! They answer what is true of cdcfusion, never invented data: every object is visible (one
//! search path, no per-schema privileges), the session's user has every role it asks about,
//! and nothing has a comment, a function definition or an on-disk size, so those are NULL
//! (psql shows an empty cell). `pg_size_pretty` is PostgreSQL's own formatting.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, StringArray};
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use datafusion::prelude::SessionContext;

/// Functions that are true of every object: each `pg_*_is_visible` (cdcfusion has one search
/// path), and `pg_has_role` (no role hierarchy; the session's user holds what it asks for).
const ALWAYS_TRUE: [&str; 13] = [
    "pg_function_is_visible",
    "pg_type_is_visible",
    "pg_operator_is_visible",
    "pg_opclass_is_visible",
    "pg_opfamily_is_visible",
    "pg_conversion_is_visible",
    "pg_collation_is_visible",
    "pg_statistics_obj_is_visible",
    "pg_ts_config_is_visible",
    "pg_ts_dict_is_visible",
    "pg_ts_parser_is_visible",
    "pg_ts_template_is_visible",
    "pg_has_role",
];

/// Text functions with nothing to say here: no object has a comment, the built-in functions
/// listed in `pg_proc` have no SQL definition in cdcfusion, no column has a sequence, and no
/// catalog row holds an expression (no column default, index predicate or check constraint:
/// `pg_get_expr` is NULL, which pgjdbc reads as an index without a filter).
/// (`pg_get_indexdef` is `indexes`'.)
const NO_TEXT: [&str; 10] = [
    "pg_get_expr",
    "obj_description",
    "col_description",
    "shobj_description",
    "pg_get_function_result",
    "pg_get_function_arguments",
    "pg_get_function_identity_arguments",
    "pg_get_functiondef",
    "pg_get_function_sqlbody",
    "pg_get_serial_sequence",
];

/// Sizes on disk, which the in-memory current tables do not have.
const NO_SIZE: [&str; 3] = ["pg_table_size", "pg_indexes_size", "pg_database_size"];

/// Registers the functions of this module in `ctx`.
pub fn install(ctx: &SessionContext) {
    for name in ALWAYS_TRUE {
        ctx.register_udf(constant(name, ScalarValue::Boolean(Some(true))));
    }
    for name in NO_TEXT {
        ctx.register_udf(constant(name, ScalarValue::Utf8(None)));
    }
    for name in NO_SIZE {
        ctx.register_udf(constant(name, ScalarValue::Int64(None)));
    }
    ctx.register_udf(ScalarUDF::new_from_impl(SizePretty::new()));
}

fn constant(name: &str, value: ScalarValue) -> ScalarUDF {
    ScalarUDF::new_from_impl(Constant {
        name: name.to_string(),
        value,
        signature: Signature::one_of(
            (1..=3).map(TypeSignature::Any).collect(),
            Volatility::Stable,
        ),
    })
}

/// A catalog function whose answer does not depend on its arguments (see the module docs).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Constant {
    name: String,
    value: ScalarValue,
    signature: Signature,
}

impl ScalarUDFImpl for Constant {
    fn name(&self) -> &str {
        &self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(self.value.data_type())
    }
    fn invoke_with_args(&self, _: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(self.value.clone()))
    }
}

/// `pg_size_pretty(bigint)`: a byte count in PostgreSQL's words.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SizePretty {
    signature: Signature,
}

impl SizePretty {
    fn new() -> Self {
        Self {
            signature: Signature::uniform(1, vec![DataType::Int64], Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for SizePretty {
    fn name(&self) -> &str {
        "pg_size_pretty"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [arg] = args.args.as_slice() else {
            return Err(DataFusionError::Plan(
                "pg_size_pretty takes one argument".into(),
            ));
        };
        let sizes = arg.to_array(args.number_rows)?;
        let pretty: StringArray = sizes
            .as_primitive::<Int64Type>()
            .iter()
            .map(|size| size.map(size_pretty))
            .collect();
        Ok(ColumnarValue::Array(Arc::new(pretty) as ArrayRef))
    }
}

/// PostgreSQL's `pg_size_pretty`: bytes below 10 kB, then the largest unit that keeps the
/// number below 20480, rounded half away from zero.
fn size_pretty(size: i64) -> String {
    const LIMIT: i64 = 10 * 1024;
    const LIMIT2: i64 = LIMIT * 2 - 1;
    if size.abs() < LIMIT {
        return format!("{size} bytes");
    }
    let half_rounded = |x: i64| (x + if x < 0 { -1 } else { 1 }) / 2;
    // One extra bit is kept for rounding.
    let mut half_units = size >> 9;
    for unit in ["kB", "MB", "GB", "TB"] {
        if half_units.abs() < LIMIT2 {
            return format!("{} {unit}", half_rounded(half_units));
        }
        half_units >>= 10;
    }
    format!("{} PB", half_rounded(half_units))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_postgresql_prints_them() {
        for (size, text) in [
            (0, "0 bytes"),
            (10239, "10239 bytes"),
            (10240, "10 kB"),
            (-10240, "-10 kB"),
            (10_485_247, "10239 kB"),
            (10_485_760, "10 MB"),
            (1_610_612_736, "1536 MB"),
            (i64::MAX, "8192 PB"),
        ] {
            assert_eq!(size_pretty(size), text, "{size}");
        }
    }
}
