//! `wasi3-probe`: a test skill for WASI 0.3's own interfaces
//! (`wasi:*@0.3.0`), which the host links for async components beside WASI
//! 0.2. Its `run` prints through `wasi:cli/stdout`'s stream (and
//! `wasi:cli/stderr`'s), waits on `wasi:clocks/monotonic-clock`, reads the
//! system clock, draws random bytes and the insecure seed, reads its
//! environment, arguments and stdin to their end, and returns what it saw
//! (or, asked to, exits through `wasi:cli/exit` after printing):
//! the tests check each against what the host promises (a captured,
//! bounded log; a virtual clock that never waits; a fixed wall clock;
//! randomness seeded per call; nothing ambient).

// The generated lift of `input`, one argument per flattened field.
#![allow(clippy::too_many_arguments)]

skillhost_sdk::generate!("wasi3-probe", generate_all);

use skillhost_sdk::__private::wit_bindgen;
use wasi::cli::{environment, exit, stderr, stdin, stdout};
use wasi::clocks::{monotonic_clock, system_clock};
use wasi::random::{insecure_seed, random};

struct Probe;

/// Writes `bytes` through `write-via-stream` of stdout or stderr; returns how
/// many the host took, or the error it ended the stream with.
async fn print(
    to: fn(
        wit_bindgen::StreamReader<u8>,
    ) -> wit_bindgen::FutureReader<Result<(), stdout::ErrorCode>>,
    bytes: Vec<u8>,
) -> Result<u64, SkillError> {
    let (mut writer, reader) = wit_stream::new::<u8>();
    let done = to(reader);
    let len = bytes.len() as u64;
    let left = writer.write_all(bytes).await;
    drop(writer);
    done.await.map_err(|e| SkillError {
        code: "output".into(),
        message: format!("the host ended the output stream: {e:?}"),
        retryable: false,
    })?;
    Ok(len - left.len() as u64)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Guest for Probe {
    skillhost_sdk::manifest! {
        capabilities: [],
        retry: never,
        estimated_duration_ms: 1,
    }

    async fn run(input: Input) -> Result<Output, SkillError> {
        let mut printed = 0;
        let line = format!("{}\n", input.print).into_bytes();
        for _ in 0..input.times {
            printed += print(stdout::write_via_stream, line.clone()).await?;
        }
        if !input.err.is_empty() {
            print(
                stderr::write_via_stream,
                format!("{}\n", input.err).into_bytes(),
            )
            .await?;
        }

        if let Some(code) = input.exit {
            exit::exit_with_code(code);
        }

        let before = monotonic_clock::now();
        monotonic_clock::wait_for(input.wait_ms.saturating_mul(1_000_000)).await;
        let waited_ns = monotonic_clock::now()
            .checked_sub(before)
            .ok_or_else(|| SkillError {
                code: "clock".into(),
                message: "the monotonic clock went backwards".into(),
                retryable: false,
            })?;

        let (mut data, finished) = stdin::read_via_stream();
        let mut stdin_bytes = 0u32;
        while let Some(_byte) = data.next().await {
            stdin_bytes += 1;
        }
        let _ = finished.await;

        let (a, b) = insecure_seed::get_insecure_seed();
        let mut seed = a.to_le_bytes().to_vec();
        seed.extend_from_slice(&b.to_le_bytes());
        Ok(Output {
            system_seconds: system_clock::now().seconds,
            waited_ns,
            random: hex(&random::get_random_bytes(u64::from(input.random_bytes))),
            insecure_seed: hex(&seed),
            environment: environment::get_environment().len() as u32,
            arguments: environment::get_arguments().len() as u32,
            stdin_bytes,
            printed,
        })
    }
}

export!(Probe);
