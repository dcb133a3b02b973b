//! Numbers as the report and the log lines print them.

/// 12345.6 → "12,346".
pub fn thousands(value: f64) -> String {
    let rounded = value.round();
    let digits = format!("{}", rounded.abs() as u64);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if rounded < 0.0 {
        out.insert(0, '-');
    }
    out
}

/// Milliseconds with the precision that matters at their size.
pub fn millis(value: f64) -> String {
    if value < 10.0 {
        format!("{value:.2}")
    } else if value < 100.0 {
        format!("{value:.1}")
    } else {
        thousands(value)
    }
}

/// `value` formatted by `f`, or a dash when there is none.
pub fn opt(value: Option<f64>, f: impl Fn(f64) -> String) -> String {
    value.map(f).unwrap_or_else(|| "–".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_formats() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1_234_567.8), "1,234,568");
        assert_eq!(thousands(-12_345.0), "-12,345");
        assert_eq!(millis(1.234), "1.23");
        assert_eq!(millis(12.34), "12.3");
        assert_eq!(millis(1234.0), "1,234");
    }
}
