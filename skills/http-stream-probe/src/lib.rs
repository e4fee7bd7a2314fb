//! `http-stream-probe`: a test skill for streamed response bodies
//! (`skillhost:skill/http-stream`). It fetches each URL it is given as a
//! stream, all at once (every head awaited together) or one after another,
//! reads each body a chunk at a time (each read asking for `read-size`
//! bytes), then its outcome, and returns each head, the bytes' size and
//! digest, and every chunk. It may first start requests it drops before
//! their heads come (`abandon`).

// The bindings pass the input record's fields as arguments.
#![allow(clippy::too_many_arguments)]

skillhost_sdk::generate!("http-stream-probe", streaming);

use futures_util::future::{join_all, ready, select};
use skillhost_sdk::__private::wit_bindgen::StreamResult;
use skillhost_sdk::bindings::streaming::skillhost::skill::http_stream;
use skillhost_sdk::http::Request;

struct Probe;

/// FNV-1a, 64 bits: a digest with no dependency, for comparing bodies.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Guest for Probe {
    skillhost_sdk::manifest! {
        capabilities: ["log", "http"],
        retry: { max_attempts: 1, initial_backoff_ms: 10 },
        estimated_duration_ms: 1000,
    }

    async fn run(input: Input) -> Result<Output, SkillError> {
        let read_size = match input.read_size {
            0 => 65536,
            n => n as usize,
        };
        let open = |url: &String| {
            let request = Request {
                method: "GET".into(),
                url: url.clone(),
                headers: input.headers.clone(),
                body: None,
                timeout_ms: None,
            };
            http_stream::fetch_stream(request)
        };
        for url in &input.abandon {
            // Polled once, the request is sent; dropped, it is cancelled
            // (unless its answer came at once).
            let _ = select(Box::pin(open(url)), ready(())).await;
        }
        let mut responses = Vec::new();
        if input.together {
            // Every request started before any head is awaited: their heads
            // are waited for at once, then each body is read in turn while
            // the others' keep arriving.
            let opened = join_all(input.urls.iter().map(open)).await;
            let mut bodies = Vec::new();
            for (url, opened) in input.urls.iter().zip(opened) {
                bodies.push((url.clone(), opened?));
            }
            for (url, (head, body, end)) in bodies {
                responses.push(read(url, head, body, end, read_size, input.drop_after).await);
            }
        } else {
            for url in &input.urls {
                let (head, body, end) = open(url).await?;
                responses
                    .push(read(url.clone(), head, body, end, read_size, input.drop_after).await);
            }
        }
        Ok(Output { responses })
    }
}

/// Reads one body chunk by chunk, then its outcome.
async fn read(
    url: String,
    head: http_stream::ResponseHead,
    mut body: skillhost_sdk::__private::wit_bindgen::StreamReader<u8>,
    end: skillhost_sdk::__private::wit_bindgen::FutureReader<Result<(), SkillError>>,
    read_size: usize,
    drop_after: u64,
) -> Fetched {
    let mut bytes = Vec::new();
    let mut chunks = Vec::new();
    loop {
        if drop_after > 0 && bytes.len() as u64 >= drop_after {
            break;
        }
        let (result, read) = body.read(Vec::with_capacity(read_size)).await;
        if !read.is_empty() {
            chunks.push(String::from_utf8_lossy(&read).into_owned());
            bytes.extend_from_slice(&read);
        }
        if matches!(result, StreamResult::Dropped | StreamResult::Cancelled) {
            break;
        }
    }
    drop(body);
    let error = end.await.err();
    Fetched {
        url,
        status: head.status,
        headers: head.headers,
        size: bytes.len() as u64,
        digest: format!("{:016x}", fnv1a(&bytes)),
        chunks,
        error,
    }
}

export!(Probe);
