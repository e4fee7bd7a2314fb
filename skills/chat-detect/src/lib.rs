//! `chat-detect`: which tool a chat message needs, by explicit rules, in
//! order (the first that matches wins):
//!
//! 1. `remember`: "remember (that) (my) KEY is|= VALUE";
//! 2. `recall`: "what is|what's (my) KEY", "recall (my) KEY", "do you
//!    remember (my) KEY";
//! 3. `url`: a word starting with `http://` or `https://` (web-fetch);
//! 4. `file-path`: a word with a known text extension (`.txt`, `.md`,
//!    `.csv`, `.json`, `.html`, `.toml`, `.log`), or a word with `/` after
//!    "read", "open", "show" or "cat" (file-read);
//! 5. `arithmetic`: the longest run of digits, operators and parentheses
//!    that holds a digit, an operator and another digit (calculate);
//! 6. otherwise no tool.
//!
//! Rules, not a model, so that the scenario's routing is deterministic and
//! every decision can be explained by the rule named in the output.

skillhost_sdk::generate!("chat-detect", additional_derives: [PartialEq]);

struct ChatDetect;

const MAX_MESSAGE_CHARS: usize = 10_000;
const TEXT_EXTENSIONS: [&str; 7] = [".txt", ".md", ".csv", ".json", ".html", ".toml", ".log"];
const FILE_VERBS: [&str; 4] = ["read", "open", "show", "cat"];

impl Guest for ChatDetect {
    skillhost_sdk::manifest! {
        name: "Chat tool detection",
        capabilities: [],
        retry: never,
        estimated_duration_ms: 1,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        let message = input.message.trim();
        if message.is_empty() {
            return Err(SkillError::invalid_input("`message` is empty"));
        }
        if message.chars().count() > MAX_MESSAGE_CHARS {
            return Err(SkillError::invalid_input(format!(
                "`message` is over {MAX_MESSAGE_CHARS} characters"
            )));
        }
        Ok(detect(message))
    }
}

export!(ChatDetect);

fn output(tool: Tool, confidence: f64, rule: &str) -> Output {
    Output {
        tool,
        confidence,
        rule: rule.to_string(),
        path: String::new(),
        url: String::new(),
        expression: String::new(),
        key: String::new(),
        value: String::new(),
    }
}

fn detect(message: &str) -> Output {
    if let Some((key, value)) = remember(message) {
        return Output {
            key,
            value,
            ..output(Tool::Remember, 0.95, "remember")
        };
    }
    if let Some(key) = recall(message) {
        return Output {
            key,
            ..output(Tool::Recall, 0.9, "recall")
        };
    }
    let words: Vec<&str> = message.split_whitespace().collect();
    if let Some(url) = words
        .iter()
        .map(|w| trim_punctuation(w))
        .find(|w| w.starts_with("http://") || w.starts_with("https://"))
    {
        return Output {
            url: url.to_string(),
            ..output(Tool::WebFetch, 0.95, "url")
        };
    }
    if let Some(path) = file_path(&words) {
        return Output {
            path,
            ..output(Tool::FileRead, 0.8, "file-path")
        };
    }
    if let Some(expression) = arithmetic(message) {
        return Output {
            expression,
            ..output(Tool::Calculate, 0.85, "arithmetic")
        };
    }
    output(Tool::None, 0.6, "no-rule")
}

/// Trailing sentence punctuation and quotes, which are not part of a URL,
/// path or value.
fn trim_punctuation(word: &str) -> &str {
    word.trim_end_matches(['.', ',', '!', '?', ';', ':', '"', '\'', ')'])
        .trim_start_matches(['"', '\'', '('])
}

/// Lowercase words joined by `-`: "Favourite Colour" and "favourite
/// colour" are one key.
fn normalize_key(key: &str) -> Option<String> {
    let words: Vec<String> = key
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    (!words.is_empty()).then(|| words.join("-"))
}

/// `text` after `prefix`, compared without case.
fn after_prefix<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

fn strip_my(text: &str) -> &str {
    let text = text.trim_start();
    after_prefix(text, "my ").unwrap_or(text)
}

fn remember(message: &str) -> Option<(String, String)> {
    let rest = after_prefix(message, "remember ")?;
    let rest = after_prefix(rest.trim_start(), "that ").unwrap_or(rest);
    let rest = strip_my(rest);
    let lower = rest.to_lowercase();
    // The first " is " or "=" splits key from value.
    let (key, value) = match (lower.find(" is "), lower.find('=')) {
        (Some(is), Some(eq)) if eq < is => (&rest[..eq], &rest[eq + 1..]),
        (Some(is), _) => (&rest[..is], &rest[is + 4..]),
        (None, Some(eq)) => (&rest[..eq], &rest[eq + 1..]),
        (None, None) => return None,
    };
    let value = value.trim().trim_end_matches(['.', '!']).trim();
    let key = normalize_key(key)?;
    (!value.is_empty()).then(|| (key, value.to_string()))
}

fn recall(message: &str) -> Option<String> {
    let message = message.trim_end_matches(['?', '.', '!']).trim();
    let rest = ["what is ", "what's ", "recall ", "do you remember "]
        .iter()
        .find_map(|prefix| after_prefix(message, prefix))?;
    let my = after_prefix(rest.trim_start(), "my ");
    // "what is 2 + 2" is not a recall: only "what is my …" is, while
    // "recall colour" needs no "my".
    let key = match my {
        Some(key) => key,
        None if after_prefix(message, "what").is_some() => return None,
        None => rest,
    };
    normalize_key(key)
}

fn file_path(words: &[&str]) -> Option<String> {
    let words: Vec<&str> = words.iter().map(|w| trim_punctuation(w)).collect();
    if let Some(path) = words.iter().find(|w| {
        let lower = w.to_lowercase();
        TEXT_EXTENSIONS
            .iter()
            .any(|ext| lower.ends_with(ext) && lower.len() > ext.len())
    }) {
        return Some(path.to_string());
    }
    words.windows(2).find_map(|pair| {
        let verb = pair[0].to_lowercase();
        (FILE_VERBS.contains(&verb.as_str()) && pair[1].contains('/')).then(|| pair[1].to_string())
    })
}

fn is_operator(c: char) -> bool {
    matches!(c, '+' | '-' | '*' | '/' | '%' | '^' | '×' | '÷')
}

fn arithmetic(message: &str) -> Option<String> {
    let allowed = |c: char| c.is_ascii_digit() || is_operator(c) || " .()".contains(c);
    let mut best: Option<String> = None;
    let mut current = String::new();
    for c in message.chars().chain(std::iter::once('\n')) {
        if allowed(c) {
            current.push(c);
            continue;
        }
        let candidate = current.trim().replace('×', "*").replace('÷', "/");
        current.clear();
        let digits = candidate.chars().filter(|c| c.is_ascii_digit()).count();
        // A digit, then an operator, then a digit: "2 + 3", not "-5" or "2024".
        let first_digit = candidate.find(|c: char| c.is_ascii_digit());
        let operator_after = first_digit.and_then(|i| {
            candidate[i..]
                .find(is_operator)
                .map(|j| i + j)
                .filter(|&j| candidate[j + 1..].contains(|c: char| c.is_ascii_digit()))
        });
        if digits >= 2
            && operator_after.is_some()
            && best.as_ref().is_none_or(|b| candidate.len() > b.len())
        {
            best = Some(candidate);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(message: &str) -> Output {
        ChatDetect::run(Input {
            message: message.into(),
        })
        .unwrap()
    }

    #[test]
    fn remember_and_recall() {
        let o = d("Remember that my favourite colour is deep green.");
        assert_eq!(o.tool, Tool::Remember);
        assert_eq!(
            (o.key.as_str(), o.value.as_str()),
            ("favourite-colour", "deep green")
        );
        let o = d("remember city = Lisbon");
        assert_eq!((o.key.as_str(), o.value.as_str()), ("city", "Lisbon"));
        let o = d("What is my favourite colour?");
        assert_eq!(o.tool, Tool::Recall);
        assert_eq!(o.key, "favourite-colour");
        assert_eq!(d("recall city").key, "city");
        assert_eq!(d("Do you remember my City?").key, "city");
        // Not a recall without "my".
        assert_eq!(d("what is the weather").tool, Tool::None);
        // "remember" without a value is not a remember.
        assert_eq!(d("remember me").tool, Tool::None);
    }

    #[test]
    fn urls_files_and_arithmetic() {
        let o = d("Fetch https://example.org/a?b=1, please.");
        assert_eq!(
            (o.tool, o.url.as_str()),
            (Tool::WebFetch, "https://example.org/a?b=1")
        );
        let o = d("Please read notes/todo.md");
        assert_eq!((o.tool, o.path.as_str()), (Tool::FileRead, "notes/todo.md"));
        let o = d("open docs/readme");
        assert_eq!((o.tool, o.path.as_str()), (Tool::FileRead, "docs/readme"));
        let o = d("What is (2 + 3) * 4.5?");
        assert_eq!(
            (o.tool, o.expression.as_str()),
            (Tool::Calculate, "(2 + 3) * 4.5")
        );
        assert_eq!(d("what is 7 × 6").expression, "7 * 6");
        // A year or a negative number is not arithmetic.
        assert_eq!(d("It is 2024 now").tool, Tool::None);
        assert_eq!(d("it was -5 degrees").tool, Tool::None);
        let o = d("hello there");
        assert_eq!((o.tool, o.rule.as_str()), (Tool::None, "no-rule"));
    }

    #[test]
    fn refuses_empty_and_huge_messages() {
        let run = |m: String| ChatDetect::run(Input { message: m }).unwrap_err().code;
        assert_eq!(run("  ".into()), "invalid-input");
        assert_eq!(run("x".repeat(MAX_MESSAGE_CHARS + 1)), "invalid-input");
    }
}
