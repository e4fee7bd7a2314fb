//! `chat-respond`: the reply, from the message and what its tool returned,
//! by one fixed template per tool. Facts come only from the tool's result,
//! and the reply names where they came from (`sources`).

// wit-bindgen's export shim takes the input's fields flattened, one
// argument each.
#![allow(clippy::too_many_arguments)]

skillhost_sdk::generate!("chat-respond");

struct ChatRespond;

/// How much of a file's or page's text a reply quotes.
const EXCERPT_CHARS: usize = 600;

impl Guest for ChatRespond {
    skillhost_sdk::manifest! {
        name: "Chat response",
        capabilities: [],
        retry: never,
        estimated_duration_ms: 1,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        let Input {
            message,
            tool,
            subject,
            outcome,
            found,
            note,
        } = input;
        let with_note = |text: String| match note.trim() {
            "" => text,
            note => format!("{text}\n\n({note})"),
        };
        let (text, sources) = match tool.as_str() {
            "none" => (
                format!(
                    "You said: \"{}\". I answer with tools only: I can read a file of my \
                     folder (\"read notes.md\"), fetch a page from the hosts I am allowed \
                     (give its URL), calculate (\"what is 2 + 3 * 4\"), and remember things \
                     between conversations (\"remember my colour is green\", then \"what is \
                     my colour\").",
                    message.trim()
                ),
                vec![],
            ),
            "calculate" => (format!("{subject} = {outcome}"), vec![]),
            "remember" => (
                with_note(format!("Noted: your {} is {outcome}.", words(&subject))),
                vec![format!("memory:{subject}")],
            ),
            "recall" if found => (
                format!("Your {} is {outcome}.", words(&subject)),
                vec![format!("memory:{subject}")],
            ),
            "recall" => (
                format!(
                    "I don't know your {0} yet. Tell me with \"remember my {0} is …\".",
                    words(&subject)
                ),
                vec![],
            ),
            "file-read" | "web-fetch" => (
                with_note(format!("{subject}:\n\n{}", excerpt(&outcome))),
                vec![subject.clone()],
            ),
            other => {
                return Err(SkillError::invalid_input(format!(
                    "unknown tool `{other}`; expected none, file-read, web-fetch, calculate, \
                     remember or recall"
                )));
            }
        };
        Ok(Output { text, sources })
    }
}

export!(ChatRespond);

/// A memory key as words: `favourite-colour` → `favourite colour`.
fn words(key: &str) -> String {
    key.replace('-', " ")
}

fn excerpt(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{} …", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(tool: &str, subject: &str, outcome: &str, found: bool, note: &str) -> Output {
        ChatRespond::run(Input {
            message: "m".into(),
            tool: tool.into(),
            subject: subject.into(),
            outcome: outcome.into(),
            found,
            note: note.into(),
        })
        .unwrap()
    }

    #[test]
    fn one_template_per_tool() {
        assert_eq!(reply("calculate", "2 + 3", "5", true, "").text, "2 + 3 = 5");
        let r = reply("remember", "favourite-colour", "green", true, "it was blue");
        assert_eq!(
            r.text,
            "Noted: your favourite colour is green.\n\n(it was blue)"
        );
        assert_eq!(r.sources, ["memory:favourite-colour"]);
        assert_eq!(
            reply("recall", "city", "Lisbon", true, "").text,
            "Your city is Lisbon."
        );
        assert!(
            reply("recall", "city", "", false, "")
                .text
                .starts_with("I don't know your city")
        );
        let long = "x".repeat(EXCERPT_CHARS + 10);
        let r = reply("file-read", "a.md", &long, true, "");
        assert!(r.text.ends_with(" …"));
        assert_eq!(r.sources, ["a.md"]);
        assert!(
            reply("none", "", "", false, "")
                .text
                .contains("I answer with tools only")
        );
        let bad = ChatRespond::run(Input {
            message: "m".into(),
            tool: "bash".into(),
            subject: String::new(),
            outcome: String::new(),
            found: false,
            note: String::new(),
        });
        assert!(bad.unwrap_err().message.contains("unknown tool `bash`"));
    }
}
