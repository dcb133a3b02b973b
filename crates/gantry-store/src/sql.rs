//! A small builder for statements whose filters vary. sqlx's `QueryBuilder` would write `?`
//! placeholders for `Any`, which PostgreSQL rejects; `$k` works on both engines.

use std::fmt::Write;

use gantry_core::Result;
use gantry_core::paging::{Page, PageRequest};
use sqlx::AnyPool;
use sqlx::any::{Any, AnyArguments, AnyRow};
use sqlx::query::Query;

#[derive(Clone)]
pub enum Value {
    Int(i64),
    Text(String),
}

impl From<i64> for Value {
    fn from(value: i64) -> Self {
        Value::Int(value)
    }
}

impl From<&str> for Value {
    fn from(value: &str) -> Self {
        Value::Text(value.to_owned())
    }
}

impl From<String> for Value {
    fn from(value: String) -> Self {
        Value::Text(value)
    }
}

/// Appends `head`, a placeholder per value separated by commas, and `)`. No values match
/// nothing (`NULL` is never equal to a value).
pub(crate) fn push_in<'a>(sql: &mut Sql, head: &str, values: impl Iterator<Item = &'a str>) {
    sql.push(head);
    let mut any = false;
    for value in values {
        if any {
            sql.push(", ");
        }
        sql.bind(value);
        any = true;
    }
    if !any {
        sql.push("NULL");
    }
    sql.push(")");
}

/// SQL text and the values of its placeholders, in order.
#[derive(Clone)]
pub struct Sql {
    text: String,
    values: Vec<Value>,
}

impl Sql {
    pub fn new(text: &str) -> Self {
        Sql {
            text: text.to_owned(),
            values: Vec::new(),
        }
    }

    pub fn push(&mut self, text: &str) -> &mut Self {
        self.text.push_str(text);
        self
    }

    /// Appends the next placeholder and remembers its value.
    pub fn bind(&mut self, value: impl Into<Value>) -> &mut Self {
        self.values.push(value.into());
        write!(self.text, "${}", self.values.len()).expect("writing to a String cannot fail");
        self
    }

    /// Remembers a value without writing it into the text; returns its placeholder, for text
    /// written later (`wrapped`'s middle, say).
    pub fn placeholder(&mut self, value: impl Into<Value>) -> String {
        self.values.push(value.into());
        format!("${}", self.values.len())
    }

    /// The same statement with `head` in front; `head` holds no placeholders.
    pub fn prefixed(&self, head: &str) -> Self {
        Sql {
            text: format!("{head}{}", self.text),
            values: self.values.clone(),
        }
    }

    /// `head`, this statement, `middle`, this statement again, `tail`: the second copy reuses the
    /// first's placeholders ($k names one value however often it appears, on both engines).
    pub fn wrapped(&self, head: &str, middle: &str, tail: &str) -> Self {
        Sql {
            text: format!("{head}{text}{middle}{text}{tail}", text = self.text),
            values: self.values.clone(),
        }
    }

    /// The same values under text that `rewrite` makes of this statement's (which may repeat it:
    /// its placeholders name the same values however often they appear).
    pub fn rewritten(&self, rewrite: impl FnOnce(&str) -> String) -> Self {
        Sql {
            text: rewrite(&self.text),
            values: self.values.clone(),
        }
    }

    pub fn query(&self) -> Query<'_, Any, AnyArguments<'_>> {
        self.values
            .iter()
            .fold(sqlx::query(&self.text), |query, value| match value {
                Value::Int(int) => query.bind(*int),
                Value::Text(text) => query.bind(text.as_str()),
            })
    }
}

/// `($1, $2, …), ($16, …)` for `rows` rows of `width` values; with `anonymous`, `(?, ?, …), …`
/// (SQLite looks a numbered placeholder up by walking a list of all of them, once per bound
/// value, which dominates a wide statement).
pub fn values_clause(rows: usize, width: usize, anonymous: bool) -> String {
    let mut text = String::with_capacity(rows * width * 5);
    for r in 0..rows {
        text.push_str(if r == 0 { "(" } else { ", (" });
        for c in 0..width {
            text.push_str(if c == 0 { "" } else { ", " });
            if anonymous {
                text.push('?');
            } else {
                let _ = write!(text, "${}", r * width + c + 1);
            }
        }
        text.push(')');
    }
    text
}

/// One page of a listing. `from_where` is the listing's `FROM ... WHERE ...`; the total counts
/// the same rows, and `order_by` must end in a unique column so that pages never overlap.
pub async fn fetch_page<T>(
    pool: &AnyPool,
    columns: &str,
    from_where: &Sql,
    order_by: &str,
    page: PageRequest,
    read: fn(&AnyRow) -> Result<T>,
) -> Result<Page<T>> {
    let total: i64 = from_where
        .prefixed("SELECT COUNT(*) AS total")
        .query()
        .fetch_one(pool)
        .await
        .and_then(|row| sqlx::Row::try_get(&row, "total"))
        .map_err(crate::error::db_error)?;
    let mut select = from_where.prefixed(&format!("SELECT {columns}"));
    select
        .push(" ORDER BY ")
        .push(order_by)
        .push(" LIMIT ")
        .bind(page.limit())
        .push(" OFFSET ")
        .bind(page.offset());
    let rows = select.query().fetch_all(pool).await.map_err(crate::error::db_error)?;
    let items = rows.iter().map(read).collect::<Result<Vec<T>>>()?;
    Ok(Page {
        request: page,
        total: total.try_into().unwrap_or_default(),
        items,
    })
}

/// A LIKE pattern matching `text` anywhere, with LIKE's wildcards in `text` taken literally
/// (the statement says `ESCAPE '\'`).
pub fn contains_pattern(text: &str) -> String {
    let mut pattern = String::with_capacity(text.len() + 2);
    pattern.push('%');
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_in_order() {
        let mut sql = Sql::new("SELECT 1 WHERE a = ");
        sql.bind(7_i64).push(" AND b = ").bind("x");
        assert_eq!(sql.text, "SELECT 1 WHERE a = $1 AND b = $2");
        assert_eq!(sql.values.len(), 2);
    }

    #[test]
    fn values_clause_numbers_rows_in_order() {
        assert_eq!(values_clause(2, 3, false), "($1, $2, $3), ($4, $5, $6)");
        assert_eq!(values_clause(2, 2, true), "(?, ?), (?, ?)");
    }

    #[test]
    fn wildcards_are_escaped() {
        assert_eq!(contains_pattern("a%b_c\\d"), "%a\\%b\\_c\\\\d%");
        assert_eq!(contains_pattern(""), "%%");
    }
}
