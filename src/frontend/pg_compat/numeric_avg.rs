//! `avg` as PostgreSQL types it: the average of integers is `numeric`, not `float8`.
//!
//! DataFusion's `avg` casts integers to `Float64`, so `avg(int)` came back as `float8` and lost
//! digits past 2^53, where PostgreSQL answers `numeric`. This `avg` coerces integers to a decimal
//! instead and leaves the computing to DataFusion's own decimal `avg` (its accumulators, group
//! accumulators and sliding windows), so only the input type changes.
//!
//! # Invariant
//! An integer or decimal input becomes a decimal of scale 12 (or its own, when larger) with
//! every integer digit of its type: exact for every value. DataFusion's decimal `avg` adds 4
//! to the scale, so the answer has scale 16, PostgreSQL's display scale for averages below
//! 10,000 in magnitude (its scale falls as the average grows; a fixed-scale Arrow column cannot
//! follow that, so larger averages carry more digits than PostgreSQL prints, of equal value).
//! DataFusion widens the running sum to keep at least 10^9 rows from overflowing. Floats and
//! intervals are averaged as before.

use datafusion::arrow::datatypes::{
    DataType, FieldRef, DECIMAL128_MAX_PRECISION, DECIMAL256_MAX_PRECISION,
};
use datafusion::error::Result;
use datafusion::functions_aggregate::average::Avg;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, GroupsAccumulator, ReversedUDAF,
    Signature, Volatility,
};
use datafusion::prelude::SessionContext;

/// Digits after the point of an integer average's input; DataFusion's `avg` adds 4.
const INPUT_SCALE: u8 = 12;

/// Registers this `avg` (and its alias `mean`) in place of DataFusion's.
pub fn install(ctx: &SessionContext) {
    ctx.register_udaf(AggregateUDF::new_from_impl(NumericAvg::new()));
}

/// DataFusion's [`Avg`] with integers coerced to decimals (see the module docs).
#[derive(Debug, PartialEq, Eq, Hash)]
struct NumericAvg {
    inner: Avg,
    signature: Signature,
}

impl NumericAvg {
    fn new() -> Self {
        Self {
            inner: Avg::new(),
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

/// The most decimal digits a value of integer type `t` has; `None` for other types.
fn integer_digits(t: &DataType) -> Option<u8> {
    use DataType as D;
    Some(match t {
        D::Int8 | D::UInt8 => 3,
        D::Int16 | D::UInt16 => 5,
        D::Int32 | D::UInt32 => 10,
        D::Int64 => 19,
        D::UInt64 => 20,
        _ => return None,
    })
}

/// The decimal holding `int_digits` integer digits and `scale` fractional ones: `Decimal128`
/// while it fits, `Decimal256` past 38 digits.
fn decimal_input(int_digits: u8, scale: u8) -> DataType {
    let precision = int_digits.saturating_add(scale);
    if precision <= DECIMAL128_MAX_PRECISION {
        DataType::Decimal128(precision, scale as i8)
    } else {
        DataType::Decimal256(precision.min(DECIMAL256_MAX_PRECISION), scale as i8)
    }
}

impl AggregateUDFImpl for NumericAvg {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        use DataType as D;
        let [t] = arg_types else {
            return datafusion::common::plan_err!(
                "avg takes one argument, not {}",
                arg_types.len()
            );
        };
        if let Some(digits) = integer_digits(t) {
            return Ok(vec![decimal_input(digits, INPUT_SCALE)]);
        }
        let coerced = match t {
            D::Decimal32(p, s) | D::Decimal64(p, s) | D::Decimal128(p, s) | D::Decimal256(p, s)
                if (0..INPUT_SCALE as i8).contains(s) =>
            {
                decimal_input(p - *s as u8, INPUT_SCALE)
            }
            D::Decimal32(..) | D::Decimal64(..) | D::Decimal128(..) | D::Decimal256(..) => {
                t.clone()
            }
            D::Duration(_) => t.clone(),
            D::Null | D::Float16 | D::Float32 | D::Float64 => D::Float64,
            other => {
                return datafusion::common::plan_err!(
                    "avg takes a number or an interval, not {other}"
                )
            }
        };
        Ok(vec![coerced])
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn accumulator(&self, acc_args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.inner.accumulator(acc_args)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        self.inner.create_groups_accumulator(args)
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.inner.create_sliding_accumulator(args)
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.inner.order_sensitivity()
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        self.inner.reverse_expr()
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::util::display::array_value_to_string;

    use super::*;

    async fn one(ctx: &SessionContext, sql: &str) -> (DataType, String) {
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let column = batches[0].column(0);
        (
            column.data_type().clone(),
            array_value_to_string(column, 0).unwrap(),
        )
    }

    #[tokio::test]
    async fn integer_averages_are_exact_decimals_and_others_stay() {
        let ctx = SessionContext::new();
        install(&ctx);
        let ints = "(SELECT CAST(v AS INT) AS x FROM (VALUES (1), (2), (NULL)) AS t(v))";
        assert_eq!(
            one(&ctx, &format!("SELECT avg(x) FROM {ints}")).await,
            (DataType::Decimal128(26, 16), "1.5000000000000000".into())
        );
        // Past 2^53 a float8 average loses the last digits; this one does not.
        let (t, v) = one(
            &ctx,
            "SELECT avg(x) FROM (VALUES (CAST(9007199254740993 AS BIGINT)), \
             (9007199254740993)) AS t(x)",
        )
        .await;
        assert_eq!(t, DataType::Decimal128(35, 16));
        assert_eq!(v, "9007199254740993.0000000000000000");
        // The largest unsigned values sum without overflow.
        let (_, v) = one(
            &ctx,
            "SELECT avg(x) FROM (VALUES (CAST(18446744073709551615 AS BIGINT UNSIGNED)), \
             (18446744073709551615)) AS t(x)",
        )
        .await;
        assert_eq!(v, "18446744073709551615.0000000000000000");
        // Grouped, windowed and `mean` take the same path.
        let grouped = ctx
            .sql("SELECT g, avg(x) FROM (VALUES (1, 1), (1, 2), (2, 7)) AS t(g, x) GROUP BY g ORDER BY g")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let avg = grouped[0].column(1);
        // The literals are BIGINTs: 19 integer digits.
        assert_eq!(avg.data_type(), &DataType::Decimal128(35, 16));
        assert_eq!(array_value_to_string(avg, 1).unwrap(), "7.0000000000000000");
        let (_, v) = one(
            &ctx,
            "SELECT mean(x) OVER (ORDER BY x ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) \
             FROM (VALUES (2), (5)) AS t(x) ORDER BY x DESC",
        )
        .await;
        assert_eq!(v, "3.5000000000000000");
        // Floats as DataFusion averages them.
        assert_eq!(
            one(
                &ctx,
                "SELECT avg(x) FROM (VALUES (1.5::double), (2.0)) AS t(x)"
            )
            .await
            .0,
            DataType::Float64
        );
        assert_eq!(
            one(
                &ctx,
                "SELECT avg(CAST(v AS DECIMAL(5,2))) FROM (VALUES (1.25), (7)) AS t(v)",
            )
            .await,
            (DataType::Decimal128(19, 16), "4.1250000000000000".into())
        );
        // A decimal too wide for Decimal128 at scale 12 is averaged as a Decimal256.
        let (t, v) = one(
            &ctx,
            "SELECT avg(x) FROM (VALUES (CAST(1 AS DECIMAL(38,2)))) AS t(x)",
        )
        .await;
        assert_eq!(
            (t, v.as_str()),
            (DataType::Decimal256(52, 16), "1.0000000000000000")
        );
        let err = ctx.sql("SELECT avg('a')").await.unwrap_err().to_string();
        assert!(err.contains("avg takes a number"), "{err}");
    }
}
