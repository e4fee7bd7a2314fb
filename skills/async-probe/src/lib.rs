//! `async-probe`: a test skill for the host's async (WASI 0.3) call path.
//! Its `run` is an `async func`, lifted with the component model's async
//! ABI; the input's `mode` makes it suspend, wait on what can never
//! complete, spin, create futures without end, grow memory, return a large
//! output or log a flood, so that the tests can show each limit holding on
//! that path as on the synchronous one; or use a granted capability (`kv`)
//! across a suspension.

skillhost_sdk::generate!("async-probe");

use skillhost_sdk::__private::wit_bindgen;
use skillhost_sdk::{kv, log};

struct Probe;

impl Guest for Probe {
    skillhost_sdk::manifest! {
        capabilities: ["log", "kv"],
        retry: never,
        estimated_duration_ms: 1,
    }

    async fn run(input: Input) -> Result<Output, SkillError> {
        let mut resumed = 0u32;
        match input.mode {
            Mode::Suspend => {
                for _ in 0..input.count {
                    wit_bindgen::yield_async().await;
                    resumed += 1;
                }
            }
            Mode::NeverResolve => {
                let (_writer, reader) = wit_future::new::<u32>(|| 0);
                let value = reader.await;
                return Ok(Output {
                    message: format!("resolved with {value}"),
                    resumed,
                });
            }
            Mode::Spin => loop {
                wit_bindgen::yield_async().await;
                resumed = resumed.wrapping_add(1);
            },
            Mode::Flood => {
                let mut kept = Vec::new();
                loop {
                    kept.push(wit_future::new::<u32>(|| 0));
                    if kept.len() % 1024 == 0 {
                        wit_bindgen::yield_async().await;
                    }
                }
            }
            Mode::Grow => {
                let mut kept: Vec<Vec<u8>> = Vec::new();
                loop {
                    kept.push(vec![1; 1 << 20]);
                    wit_bindgen::yield_async().await;
                }
            }
            Mode::BigOutput => {
                return Ok(Output {
                    message: "x".repeat(input.count as usize),
                    resumed,
                });
            }
            Mode::Remember => {
                let key = format!("count-{}", input.count);
                kv::set_text(&key, &input.count.to_string())?;
                wit_bindgen::yield_async().await;
                let value = kv::get_text(&key)?.unwrap_or_default();
                return Ok(Output {
                    message: value,
                    resumed: 1,
                });
            }
            Mode::Chatty => {
                for i in 0..input.count {
                    log::info(format!("line {i}"));
                    if i % 1000 == 0 {
                        wit_bindgen::yield_async().await;
                    }
                }
            }
        }
        Ok(Output {
            message: "ok".into(),
            resumed,
        })
    }

    async fn pending() -> wit_bindgen::FutureReader<u32> {
        wit_future::new::<u32>(|| 0).1
    }
}

export!(Probe);
