//! Composite values in catalog queries, as pgjdbc's `DatabaseMetaData` uses them: a field of a
//! composite value (`(i.keys).x`) and `information_schema._pg_expandarray(a)`, the set of
//! `(x, n)` pairs of an array's elements and their ordinals (`getPrimaryKeys`,
//! `getIndexInfo`, `getBestRowIdentifier`).
//!
//! DataFusion has neither: it refuses `.field` on a parenthesised expression, and has no
//! set-returning functions in a `SELECT` list besides `unnest`. So `(e).f` becomes
//! `get_field(e, 'f')`, and `_pg_expandarray(a)` becomes `unnest(pg_expandarray_items(a))`,
//! where [`ExpandArrayItems`] turns each array into a list of `{x, n}` structs.
//!
//! # Invariant
//! The rewritten expressions give PostgreSQL's rows: one per array element, `n` counting from
//! 1 in array order, an empty or NULL array giving no row; several `_pg_expandarray` calls in
//! one `SELECT` list advance together, as PostgreSQL runs set-returning functions of one list
//! in lockstep. Field names fold to lower case unless quoted, as identifiers do.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int32Array, ListArray, StructArray};
use datafusion::arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::{exec_err, plan_err};
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};
use sqlparser::ast::{
    AccessExpr, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, Value,
};

use crate::frontend::pg_compat::catalog_ast::{call, call_with};

/// The function `_pg_expandarray` is rewritten to call.
pub const EXPAND_ARRAY_ITEMS: &str = "pg_expandarray_items";

/// Rewrites one expression, if it is one this module handles.
pub fn rewrite(expr: &Expr) -> Option<Expr> {
    field_access(expr).or_else(|| expand_array(expr))
}

/// `(e).f.g` becomes `get_field(get_field(e, 'f'), 'g')`.
fn field_access(expr: &Expr) -> Option<Expr> {
    let Expr::CompoundFieldAccess { root, access_chain } = expr else {
        return None;
    };
    if !matches!(root.as_ref(), Expr::Nested(_)) {
        return None;
    }
    let mut fields = Vec::with_capacity(access_chain.len());
    for access in access_chain {
        let AccessExpr::Dot(Expr::Identifier(ident)) = access else {
            return None;
        };
        fields.push(folded(ident));
    }
    Some(
        fields
            .into_iter()
            .fold(root.as_ref().clone(), |value, field| {
                call_with(
                    "get_field",
                    vec![value, Expr::value(Value::SingleQuotedString(field))],
                )
            }),
    )
}

/// An identifier's name as PostgreSQL resolves it: lower case unless quoted.
fn folded(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

/// `[information_schema.]_pg_expandarray(a)` becomes `unnest(pg_expandarray_items(a))`.
fn expand_array(expr: &Expr) -> Option<Expr> {
    let Expr::Function(function) = expr else {
        return None;
    };
    let parts: Vec<Option<&Ident>> = function.name.0.iter().map(|p| p.as_ident()).collect();
    let named = match parts.as_slice() {
        [Some(schema), Some(name)] => {
            schema.value.eq_ignore_ascii_case("information_schema")
                && name.value.eq_ignore_ascii_case("_pg_expandarray")
        }
        [Some(name)] => name.value.eq_ignore_ascii_case("_pg_expandarray"),
        _ => false,
    };
    let FunctionArguments::List(list) = &function.args else {
        return None;
    };
    let [FunctionArg::Unnamed(FunctionArgExpr::Expr(array))] = list.args.as_slice() else {
        return None;
    };
    named.then(|| {
        call(
            "unnest",
            call(EXPAND_ARRAY_ITEMS, array.clone(), Vec::new()),
            Vec::new(),
        )
    })
}

/// `pg_expandarray_items(a)`: each array as the list of its `{x: element, n: ordinal}`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ExpandArrayItems {
    signature: Signature,
}

impl ExpandArrayItems {
    pub fn new() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }

    fn item_fields(element: &DataType) -> Fields {
        Fields::from(vec![
            Field::new("x", element.clone(), true),
            Field::new("n", DataType::Int32, false),
        ])
    }
}

/// The element type of a list type.
fn element_type(list: &DataType) -> Result<&DataType> {
    match list {
        DataType::List(item) => Ok(item.data_type()),
        other => plan_err!("_pg_expandarray() expects an array, not {other}"),
    }
}

impl ScalarUDFImpl for ExpandArrayItems {
    fn name(&self) -> &str {
        EXPAND_ARRAY_ITEMS
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        let fields = Self::item_fields(element_type(&args[0])?);
        Ok(DataType::List(Arc::new(Field::new(
            "item",
            DataType::Struct(fields),
            true,
        ))))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let Some(lists) = arrays[0].as_list_opt::<i32>() else {
            return exec_err!("_pg_expandarray() expects an array");
        };
        let offsets = lists.offsets();
        let ordinals = Int32Array::from_iter_values(
            (0..lists.len()).flat_map(|i| 1..=(offsets[i + 1] - offsets[i])),
        );
        let values = lists.values().slice(
            offsets[0] as usize,
            (offsets[lists.len()] - offsets[0]) as usize,
        );
        let fields = Self::item_fields(values.data_type());
        let items = StructArray::try_new(
            fields.clone(),
            vec![values, Arc::new(ordinals) as ArrayRef],
            None,
        )?;
        let rebased = datafusion::arrow::buffer::OffsetBuffer::new(
            offsets.iter().map(|o| o - offsets[0]).collect(),
        );
        let list = ListArray::try_new(
            Arc::new(Field::new("item", DataType::Struct(fields), true)),
            rebased,
            Arc::new(items),
            lists.nulls().cloned(),
        )?;
        Ok(ColumnarValue::Array(Arc::new(list)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Int16Type;
    use datafusion::config::ConfigOptions;

    fn rewritten(sql: &str) -> String {
        let mut expr = crate::frontend::pg_compat::pg_expr(sql);
        let _ = sqlparser::ast::visit_expressions_mut(&mut expr, |e| {
            if let Some(r) = rewrite(e) {
                *e = r;
            }
            std::ops::ControlFlow::<()>::Continue(())
        });
        expr.to_string()
    }

    #[test]
    fn composite_fields_and_expanded_arrays_become_what_datafusion_plans() {
        assert_eq!(rewritten("(i.keys).x"), "get_field((i.keys), 'x')");
        assert_eq!(
            rewritten(r#"(s)."N".y"#),
            "get_field(get_field((s), 'N'), 'y')"
        );
        assert_eq!(
            rewritten("(information_schema._pg_expandarray(i.indkey)).n"),
            "get_field((unnest(pg_expandarray_items(i.indkey))), 'n')"
        );
        assert_eq!(
            rewritten("_pg_expandarray(a)"),
            "unnest(pg_expandarray_items(a))"
        );
        // Not ours: a qualified column, another schema's function.
        assert_eq!(rewritten("a.b.c"), "a.b.c");
        assert_eq!(
            rewritten("other._pg_expandarray(a)"),
            "other._pg_expandarray(a)"
        );
    }

    #[test]
    fn items_pair_each_element_with_its_ordinal() {
        let lists: ArrayRef = Arc::new(
            ListArray::from_iter_primitive::<Int16Type, _, _>([
                Some(vec![Some(3), Some(1)]),
                None,
                Some(vec![]),
                Some(vec![Some(2)]),
            ])
            .slice(0, 4),
        );
        let udf = ExpandArrayItems::new();
        let return_type = udf.return_type(&[lists.data_type().clone()]).unwrap();
        let out = udf
            .invoke_with_args(ScalarFunctionArgs {
                args: vec![ColumnarValue::Array(Arc::clone(&lists))],
                arg_fields: vec![Arc::new(Field::new("a", lists.data_type().clone(), true))],
                number_rows: 4,
                return_field: Arc::new(Field::new("r", return_type, true)),
                config_options: Arc::new(ConfigOptions::default()),
            })
            .unwrap();
        let ColumnarValue::Array(out) = out else {
            panic!("not an array")
        };
        let out = out.as_list::<i32>();
        let rows: Vec<Option<Vec<(i16, i32)>>> = (0..out.len())
            .map(|i| {
                out.is_valid(i).then(|| {
                    let items = out.value(i);
                    let items = items.as_struct();
                    let x = items.column(0).as_primitive::<Int16Type>();
                    let n = items
                        .column(1)
                        .as_primitive::<datafusion::arrow::datatypes::Int32Type>();
                    (0..items.len()).map(|j| (x.value(j), n.value(j))).collect()
                })
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                Some(vec![(3, 1), (1, 2)]),
                None,
                Some(vec![]),
                Some(vec![(2, 1)])
            ]
        );
    }
}
