//! A rule's conditions: a comparison of an attribute's value with a literal bound or one named
//! in the device's metadata, typed against the attribute's dataType when parsed.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::enums::DataType;
use crate::records::JsonMap;
use crate::{Error, Result};

/// A comparison of the value with one bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    Gt,
    Ge,
    Lt,
    Le,
    Eq,
    Ne,
}

impl CompareOp {
    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            ">" => Self::Gt,
            ">=" => Self::Ge,
            "<" => Self::Lt,
            "<=" => Self::Le,
            "==" => Self::Eq,
            "!=" => Self::Ne,
            _ => return None,
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Gt => ">",
            Self::Ge => ">=",
            Self::Lt => "<",
            Self::Le => "<=",
            Self::Eq => "==",
            Self::Ne => "!=",
        }
    }

    fn ordering(self) -> bool {
        !matches!(self, Self::Eq | Self::Ne)
    }
}

/// A bound of a condition: a literal of the attribute's type, or the key of the device's
/// `metadata` that holds it.
#[derive(Debug, Clone, PartialEq)]
pub enum Bound {
    Value(Value),
    From(String),
}

/// What a condition tests.
#[derive(Debug, Clone, PartialEq)]
pub enum Test {
    Compare(CompareOp, Bound),
    /// `between` (inside, ends included) or `outside` (strictly beyond an end).
    Range {
        inside: bool,
        low: Bound,
        high: Bound,
    },
}

/// A condition on an attribute's value, typed by the attribute's dataType.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub test: Test,
    pub data_type: DataType,
}

/// A condition as it is sent and shown: `{op, value | valueFrom}` or `{op, low | lowFrom, high | highFrom}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ConditionSpec {
    /// `>`, `>=`, `<`, `<=`, `==`, `!=`, `between` or `outside`. Ordering operators and ranges
    /// only on Integer and Float attributes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    /// The bound of a comparison, of the attribute's type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// Instead of `value`: the key of the device's `metadata` holding the bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<String>,
    /// The low end of `between` / `outside`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low_from: Option<String>,
    /// The high end of `between` / `outside`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high_from: Option<String>,
}

impl Condition {
    /// Parses `spec` (sent in `field`) as a condition on a value of `data_type`.
    pub fn parse(field: &str, spec: &ConditionSpec, data_type: DataType) -> Result<Condition> {
        let bad = |sub: &str, reason: String| Error::invalid(format!("{field}.{sub}"), reason);
        let op = spec
            .op
            .as_deref()
            .ok_or_else(|| bad("op", "is required (the condition is empty)".into()))?;
        let numeric = matches!(data_type, DataType::Integer | DataType::Float);
        let test = match op {
            "between" | "outside" => {
                if !numeric {
                    return Err(bad(
                        "op",
                        format!("`{op}` needs an Integer or Float attribute, not {data_type}"),
                    ));
                }
                let low = bound(field, ("low", &spec.low), ("lowFrom", &spec.low_from), data_type)?;
                let high = bound(field, ("high", &spec.high), ("highFrom", &spec.high_from), data_type)?;
                if let (Bound::Value(l), Bound::Value(h)) = (&low, &high)
                    && number(l) > number(h)
                {
                    return Err(bad("high", "is below low".into()));
                }
                Test::Range {
                    inside: op == "between",
                    low,
                    high,
                }
            }
            _ => {
                let compare = CompareOp::parse(op).ok_or_else(|| {
                    bad(
                        "op",
                        format!("`{op}` is not one of >, >=, <, <=, ==, !=, between, outside"),
                    )
                })?;
                if compare.ordering() && !numeric {
                    return Err(bad(
                        "op",
                        format!("`{op}` needs an Integer or Float attribute, not {data_type}"),
                    ));
                }
                let bound = bound(
                    field,
                    ("value", &spec.value),
                    ("valueFrom", &spec.value_from),
                    data_type,
                )?;
                Test::Compare(compare, bound)
            }
        };
        Ok(Condition { test, data_type })
    }

    /// The form it is shown in.
    pub fn spec(&self) -> ConditionSpec {
        let split = |b: &Bound| match b {
            Bound::Value(v) => (Some(v.clone()), None),
            Bound::From(k) => (None, Some(k.clone())),
        };
        match &self.test {
            Test::Compare(op, b) => {
                let (value, value_from) = split(b);
                ConditionSpec {
                    op: Some(op.as_str().to_owned()),
                    value,
                    value_from,
                    ..ConditionSpec::default()
                }
            }
            Test::Range { inside, low, high } => {
                let ((low, low_from), (high, high_from)) = (split(low), split(high));
                ConditionSpec {
                    op: Some(if *inside { "between" } else { "outside" }.to_owned()),
                    low,
                    low_from,
                    high,
                    high_from,
                    ..ConditionSpec::default()
                }
            }
        }
    }

    /// The metadata keys the condition reads.
    pub fn keys(&self) -> Vec<&str> {
        fn key(b: &Bound) -> Option<&str> {
            match b {
                Bound::From(k) => Some(k.as_str()),
                Bound::Value(_) => None,
            }
        }
        match &self.test {
            Test::Compare(_, b) => key(b).into_iter().collect(),
            Test::Range { low, high, .. } => key(low).into_iter().chain(key(high)).collect(),
        }
    }

    /// Whether `value` meets the condition on a device with `metadata`; None when a bound names a
    /// key the metadata lacks or holds a value of another type (the device is not evaluated).
    pub fn holds(&self, value: &Value, metadata: &JsonMap) -> Option<bool> {
        let resolve = |b: &Bound| -> Option<Value> {
            match b {
                Bound::Value(v) => Some(v.clone()),
                Bound::From(key) => metadata.get(key).filter(|v| accepts_bound(self.data_type, v)).cloned(),
            }
        };
        match &self.test {
            Test::Compare(op, b) => {
                let bound = resolve(b)?;
                Some(match op {
                    CompareOp::Eq => same(value, &bound),
                    CompareOp::Ne => !same(value, &bound),
                    _ => {
                        let (v, b) = (number(value)?, number(&bound)?);
                        match op {
                            CompareOp::Gt => v > b,
                            CompareOp::Ge => v >= b,
                            CompareOp::Lt => v < b,
                            _ => v <= b,
                        }
                    }
                })
            }
            Test::Range { inside, low, high } => {
                let (low, high, v) = (number(&resolve(low)?)?, number(&resolve(high)?)?, number(value)?);
                let within = low <= v && v <= high;
                Some(if *inside { within } else { v < low || v > high })
            }
        }
    }
}

/// The bound a condition names in `(value field, value)` or `(key field, key)`: exactly one.
fn bound(
    field: &str,
    (value_field, value): (&str, &Option<Value>),
    (key_field, key): (&str, &Option<String>),
    data_type: DataType,
) -> Result<Bound> {
    match (value, key) {
        (Some(_), Some(_)) => Err(Error::invalid(
            format!("{field}.{key_field}"),
            format!("is given with {value_field}; give one of them"),
        )),
        (None, None) => Err(Error::invalid(
            format!("{field}.{value_field}"),
            format!("is required (or {key_field})"),
        )),
        (Some(v), None) if !accepts_bound(data_type, v) => Err(Error::invalid(
            format!("{field}.{value_field}"),
            format!("`{v}` is not a value of type {data_type}"),
        )),
        (Some(v), None) => Ok(Bound::Value(v.clone())),
        (None, Some(k)) if k.trim().is_empty() || k.len() > 128 => Err(Error::invalid(
            format!("{field}.{key_field}"),
            "must be a metadata key of 1 to 128 characters",
        )),
        (None, Some(k)) => Ok(Bound::From(k.clone())),
    }
}

/// A bound of an Integer attribute may be any number: a limit of 12.5 on a whole count is sound.
pub(super) fn accepts_bound(data_type: DataType, v: &Value) -> bool {
    match data_type {
        DataType::Integer | DataType::Float => v.is_number(),
        other => other.accepts(v),
    }
}

fn number(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// Equality of two values of one type; numbers by value (`3` equals `3.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}
