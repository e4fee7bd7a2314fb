//! `chat-calc`: evaluates an arithmetic expression by recursive descent:
//!
//! ```text
//! expr  = term (("+" | "-") term)*
//! term  = unary (("*" | "/" | "%") unary)*
//! unary = "-" unary | power
//! power = atom ("^" unary)?          (right associative)
//! atom  = number | "(" expr ")"
//! ```
//!
//! Bounded: 1,000 characters, parentheses 64 deep, and a result that must
//! be a finite number.

skillhost_sdk::generate!("chat-calc");

struct ChatCalc;

const MAX_CHARS: usize = 1_000;
const MAX_DEPTH: usize = 64;

impl Guest for ChatCalc {
    skillhost_sdk::manifest! {
        name: "Calculator",
        capabilities: [],
        retry: never,
        estimated_duration_ms: 1,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        let value = evaluate(&input.expression).map_err(SkillError::invalid_input)?;
        Ok(Output {
            text: format_number(value),
            expression: input.expression,
            value,
        })
    }
}

export!(ChatCalc);

/// The value of `expression`, or what is wrong with it.
pub fn evaluate(expression: &str) -> Result<f64, String> {
    if expression.trim().is_empty() {
        return Err("the expression is empty".into());
    }
    if expression.chars().count() > MAX_CHARS {
        return Err(format!("the expression is over {MAX_CHARS} characters"));
    }
    let mut parser = Parser {
        chars: expression.chars().collect(),
        at: 0,
        depth: 0,
    };
    let value = parser.expr()?;
    parser.skip_spaces();
    if let Some(c) = parser.peek() {
        return Err(format!("unexpected `{c}` at character {}", parser.at + 1));
    }
    if !value.is_finite() {
        return Err(format!(
            "the result is not a finite number (`{expression}`)"
        ));
    }
    Ok(value)
}

struct Parser {
    chars: Vec<char>,
    at: usize,
    depth: usize,
}

impl Parser {
    fn skip_spaces(&mut self) {
        while self.chars.get(self.at).is_some_and(|c| c.is_whitespace()) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<char> {
        self.skip_spaces();
        self.chars.get(self.at).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expr(&mut self) -> Result<f64, String> {
        let mut value = self.term()?;
        loop {
            if self.eat('+') {
                value += self.term()?;
            } else if self.eat('-') {
                value -= self.term()?;
            } else {
                return Ok(value);
            }
        }
    }

    fn term(&mut self) -> Result<f64, String> {
        let mut value = self.unary()?;
        loop {
            let op = match self.peek() {
                Some(op @ ('*' | '/' | '%')) => op,
                _ => return Ok(value),
            };
            let at = self.at + 1;
            self.at += 1;
            let rhs = self.unary()?;
            if op != '*' && rhs == 0.0 {
                return Err(format!("division by zero at character {at}"));
            }
            value = match op {
                '*' => value * rhs,
                '/' => value / rhs,
                _ => value % rhs,
            };
        }
    }

    fn unary(&mut self) -> Result<f64, String> {
        if self.eat('-') {
            return self.nested(|p| p.unary()).map(|v| -v);
        }
        self.power()
    }

    fn power(&mut self) -> Result<f64, String> {
        let base = self.atom()?;
        if self.eat('^') {
            let exponent = self.nested(|p| p.unary())?;
            return Ok(base.powf(exponent));
        }
        Ok(base)
    }

    /// Runs `f` one level deeper, refusing past [`MAX_DEPTH`].
    fn nested(&mut self, f: impl FnOnce(&mut Self) -> Result<f64, String>) -> Result<f64, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("nested more than {MAX_DEPTH} deep"));
        }
        let value = f(self);
        self.depth -= 1;
        value
    }

    fn atom(&mut self) -> Result<f64, String> {
        match self.peek() {
            Some('(') => {
                let open = self.at + 1;
                self.at += 1;
                let value = self.nested(|p| p.expr())?;
                if !self.eat(')') {
                    return Err(format!("the `(` at character {open} is not closed"));
                }
                Ok(value)
            }
            Some(c) if c.is_ascii_digit() || c == '.' => {
                let start = self.at;
                while self
                    .chars
                    .get(self.at)
                    .is_some_and(|c| c.is_ascii_digit() || *c == '.')
                {
                    self.at += 1;
                }
                let text: String = self.chars[start..self.at].iter().collect();
                text.parse::<f64>()
                    .map_err(|_| format!("`{text}` at character {} is not a number", start + 1))
            }
            Some(c) => Err(format!("unexpected `{c}` at character {}", self.at + 1)),
            None => Err("the expression ends where a number was expected".into()),
        }
    }
}

/// An integer without a decimal point; else at most 12 significant digits,
/// trailing zeros dropped.
pub fn format_number(value: f64) -> String {
    if value == value.trunc() && value.abs() < 1e15 {
        return format!("{}", value as i64);
    }
    let digits = 11 - value.abs().log10().floor().clamp(-20.0, 11.0) as i32;
    let text = format!("{value:.*}", digits.max(0) as usize);
    let text = text.trim_end_matches('0').trim_end_matches('.');
    text.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_associativity_and_parentheses() {
        assert_eq!(evaluate("2 + 3 * 4").unwrap(), 14.0);
        assert_eq!(evaluate("(2 + 3) * 4").unwrap(), 20.0);
        assert_eq!(evaluate("2 ^ 3 ^ 2").unwrap(), 512.0);
        assert_eq!(evaluate("-2 ^ 2").unwrap(), -4.0);
        assert_eq!(evaluate("10 - 4 - 3").unwrap(), 3.0);
        assert_eq!(evaluate("17 % 5").unwrap(), 2.0);
        assert_eq!(evaluate("1.5 * 4").unwrap(), 6.0);
        assert_eq!(format_number(evaluate("1 / 3").unwrap()), "0.333333333333");
        assert_eq!(format_number(evaluate("(2 + 3) * 4.5").unwrap()), "22.5");
        assert_eq!(format_number(14.0), "14");
    }

    #[test]
    fn bad_expressions_name_the_place() {
        assert!(evaluate("1 / 0").unwrap_err().contains("division by zero"));
        assert!(evaluate("2 +").unwrap_err().contains("ends"));
        assert!(evaluate("(1 + 2").unwrap_err().contains("not closed"));
        assert!(evaluate("1 + x").unwrap_err().contains("character 5"));
        assert!(evaluate("1..2").unwrap_err().contains("not a number"));
        assert!(evaluate("").unwrap_err().contains("empty"));
        assert!(evaluate("10 ^ 400").unwrap_err().contains("finite"));
        let deep = format!("{}1{}", "(".repeat(100), ")".repeat(100));
        assert!(evaluate(&deep).unwrap_err().contains("nested"));
        assert!(
            evaluate(&"1+".repeat(600))
                .unwrap_err()
                .contains("characters")
        );
    }
}
