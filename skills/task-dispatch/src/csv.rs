//! Reading CSV lines and decimal amounts. One line is one row (a quoted
//! field cannot hold a line break); a field may be quoted with `"`, a quote
//! inside it doubled (`""`).

/// The fields of one CSV line.
pub fn fields(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            ('"', true) => quoted = false,
            ('"', false) if field.is_empty() => quoted = true,
            (',', false) => fields.push(std::mem::take(&mut field)),
            _ => field.push(c),
        }
    }
    fields.push(field);
    fields
}

/// A decimal number as written (`-?DIGITS[.DIGITS]`, at most three
/// decimals) in thousandths; `None` for anything else, or out of range.
pub fn decimal_milli(text: &str) -> Option<i64> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty()
        || !all_digits(whole)
        || !all_digits(fraction)
        || fraction.len() > 3
        || (digits.contains('.') && fraction.is_empty())
    {
        return None;
    }
    let mut milli: i64 = whole.parse::<i64>().ok()?.checked_mul(1000)?;
    let scale = [100, 10, 1];
    for (digit, unit) in fraction.bytes().zip(scale) {
        milli = milli.checked_add(i64::from(digit - b'0') * unit)?;
    }
    Some(if negative { -milli } else { milli })
}

/// What a lenient reader makes of an amount that is not a decimal number:
/// a decimal comma is a point, every character but digits, `.` and a
/// leading `-` is dropped, and what still is no number is 0.
pub fn lenient_milli(text: &str) -> i64 {
    let cleaned: String = text
        .replace(',', ".")
        .chars()
        .enumerate()
        .filter(|&(i, c)| c.is_ascii_digit() || c == '.' || (c == '-' && i == 0))
        .map(|(_, c)| c)
        .collect();
    decimal_milli(&cleaned).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_fields_with_quotes() {
        assert_eq!(fields("a,b,,c"), ["a", "b", "", "c"]);
        assert_eq!(fields(r#"2016,"0,4",x"#), ["2016", "0,4", "x"]);
        assert_eq!(fields(r#""say ""hi""",1"#), [r#"say "hi""#, "1"]);
        assert_eq!(fields("1.0,7.8,"), ["1.0", "7.8", ""]);
    }

    #[test]
    fn reads_decimal_amounts_strictly() {
        assert_eq!(decimal_milli("0.0"), Some(0));
        assert_eq!(decimal_milli("10.9"), Some(10_900));
        assert_eq!(decimal_milli("-1.5"), Some(-1_500));
        assert_eq!(decimal_milli("7"), Some(7_000));
        assert_eq!(decimal_milli("0.125"), Some(125));
        for bad in [
            "", "-", "n/a", "0,4", "3.2 mm", "1.", ".5", "1.2345", "+1", "1e3",
        ] {
            assert_eq!(decimal_milli(bad), None, "{bad}");
        }
        assert_eq!(decimal_milli("99999999999999999999"), None);
    }

    #[test]
    fn reads_malformed_amounts_leniently() {
        assert_eq!(lenient_milli("0,4"), 400);
        assert_eq!(lenient_milli("3.2 mm"), 3_200);
        assert_eq!(lenient_milli("n/a"), 0);
        assert_eq!(lenient_milli("1.2.3"), 0);
    }
}
