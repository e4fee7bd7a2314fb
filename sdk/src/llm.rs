//! Text generation through the provider the scenario grants
//! (`llm = "PROVIDER/MODEL"`). The host records every completion in the run's
//! journal, so a replay never calls the model again.
//!
//! On native targets there is no model: a test installs a handler with
//! [`crate::testing::set_llm_handler`]; without one, `complete` returns
//! `capability-not-granted`.

use crate::SkillError;
pub use crate::bindings::skillhost::skill::llm::{Completion, CompletionRequest, Message, Role};

/// Asks the granted model for a completion.
pub fn complete(request: &CompletionRequest) -> Result<Completion, SkillError> {
    #[cfg(target_arch = "wasm32")]
    return crate::bindings::skillhost::skill::llm::complete(request);
    #[cfg(not(target_arch = "wasm32"))]
    return crate::native::llm_complete(request);
}

/// One system and one user message, default limits.
pub fn prompt(system: &str, user: &str) -> Result<Completion, SkillError> {
    complete(&CompletionRequest {
        messages: vec![
            Message {
                role: Role::System,
                content: system.to_string(),
            },
            Message {
                role: Role::User,
                content: user.to_string(),
            },
        ],
        max_tokens: None,
        temperature: None,
        json_schema: None,
    })
}

#[cfg(feature = "async")]
pub use streaming::{CompletionStream, complete_stream};

/// Streamed completions (`skillhost:skill/llm-stream`), for async skills
/// whose world includes `streaming` (`generate!(WORLD, streaming)`).
#[cfg(feature = "async")]
mod streaming {
    use super::{Completion, CompletionRequest};
    use crate::SkillError;

    /// Starts a completion streamed as the model generates it: the host
    /// checks the request as [`super::complete`] does (the grant, the
    /// messages, `max-tokens`, a `json-schema`, the token budget, the bound
    /// of streams in flight) and answers at once; the text then comes as
    /// deltas ([`CompletionStream::next`]) and the whole completion at the
    /// end ([`CompletionStream::finish`]). Each delta the skill reads also
    /// reaches the people following the run (`host run`'s progress line,
    /// `--events`, the run page, MCP), and the journal records them, so a
    /// replay reads the same deltas without a provider.
    ///
    /// ```ignore
    /// let mut stream = llm::complete_stream(&request)?;
    /// while let Some(delta) = stream.next().await {
    ///     // the text so far, as it comes
    /// }
    /// let completion = stream.finish().await?; // content = the deltas joined
    /// ```
    ///
    /// On native targets the handler of
    /// [`crate::testing::set_llm_handler`] answers, and its content comes
    /// as deltas of one word each (with the whitespace after it).
    pub fn complete_stream(request: &CompletionRequest) -> Result<CompletionStream, SkillError> {
        #[cfg(target_arch = "wasm32")]
        {
            let (deltas, end) =
                crate::bindings::streaming::skillhost::skill::llm_stream::complete_stream(request)?;
            Ok(CompletionStream {
                deltas: Some(deltas),
                end,
            })
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            let answer = crate::native::llm_stream(request)?;
            let deltas = match &answer {
                Ok(completion) => split_words(&completion.content),
                Err(_) => Default::default(),
            };
            Ok(CompletionStream {
                deltas,
                end: Some(answer),
            })
        }
    }

    /// A completion being streamed: its deltas, then the completion.
    /// Dropping it before its end stops the host reading the provider (the
    /// completion is then abandoned).
    pub struct CompletionStream {
        #[cfg(target_arch = "wasm32")]
        deltas: Option<crate::__private::wit_bindgen::StreamReader<String>>,
        #[cfg(target_arch = "wasm32")]
        end: crate::__private::wit_bindgen::FutureReader<Result<Completion, SkillError>>,
        #[cfg(not(target_arch = "wasm32"))]
        deltas: std::collections::VecDeque<String>,
        #[cfg(not(target_arch = "wasm32"))]
        end: Option<Result<Completion, SkillError>>,
    }

    impl CompletionStream {
        /// The next piece of text, as the provider sent it; `None` once the
        /// stream has ended (the provider is done, or failed: then
        /// [`finish`](Self::finish) says why).
        pub async fn next(&mut self) -> Option<String> {
            #[cfg(target_arch = "wasm32")]
            {
                use crate::__private::wit_bindgen::StreamResult;
                let deltas = self.deltas.as_mut()?;
                loop {
                    let (result, mut read) = deltas.read(Vec::with_capacity(1)).await;
                    if let Some(delta) = read.pop() {
                        return Some(delta);
                    }
                    if matches!(result, StreamResult::Dropped) {
                        self.deltas = None;
                        return None;
                    }
                }
            }
            #[cfg(not(target_arch = "wasm32"))]
            self.deltas.pop_front()
        }

        /// The whole completion (its `content` is the deltas concatenated,
        /// unless a `json-schema` that is not an object's was asked for:
        /// then the value, unwrapped), or the error that ended the stream:
        /// the provider's, a cut stream (`provider-unavailable`,
        /// retryable), or an answer that does not fit the `json-schema`
        /// (`invalid-output`, retryable), as [`super::complete`] says it.
        /// Reads the deltas not read yet first, so they still reach the
        /// people following the run.
        pub async fn finish(mut self) -> Result<Completion, SkillError> {
            while self.next().await.is_some() {}
            #[cfg(target_arch = "wasm32")]
            return self.end.await;
            #[cfg(not(target_arch = "wasm32"))]
            return self
                .end
                .take()
                .unwrap_or_else(|| Err(SkillError::internal("the completion was already taken")));
        }

        /// Reads the stream to its end, handing each delta to `on_delta`,
        /// then returns [`finish`](Self::finish)'s answer.
        pub async fn for_each(
            mut self,
            mut on_delta: impl FnMut(&str),
        ) -> Result<Completion, SkillError> {
            while let Some(delta) = self.next().await {
                on_delta(&delta);
            }
            self.finish().await
        }
    }

    /// `text` cut after each run of whitespace: the native stand-in's
    /// deltas, which join back to `text`.
    #[cfg(not(target_arch = "wasm32"))]
    fn split_words(text: &str) -> std::collections::VecDeque<String> {
        let mut deltas = std::collections::VecDeque::new();
        let mut start = 0;
        let mut in_space = false;
        for (i, c) in text.char_indices() {
            if c.is_whitespace() {
                in_space = true;
            } else if in_space {
                deltas.push_back(text[start..i].to_string());
                start = i;
                in_space = false;
            }
        }
        if start < text.len() {
            deltas.push_back(text[start..].to_string());
        }
        deltas
    }

    #[cfg(all(test, not(target_arch = "wasm32")))]
    mod tests {
        #[test]
        fn native_deltas_join_back_to_the_text() {
            for text in ["", "one", " lead and  trail ", "a\nb\tc"] {
                let deltas = super::split_words(text);
                assert_eq!(deltas.iter().map(String::as_str).collect::<String>(), text);
            }
            assert_eq!(super::split_words("a b  c"), ["a ", "b  ", "c"]);
        }
    }
}
