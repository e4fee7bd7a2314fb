//! Where a server may listen: a loopback address trusts its machine, any
//! other needs a token; and where a token comes from.

use std::net::SocketAddr;
use std::path::Path;

/// Why a server will not listen where it was asked to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    #[error(
        "{flag} {addr} is not a loopback address: anyone who reaches it could read, start, \
         answer and cancel runs. Give a token with --token T or --token-file FILE (clients send \
         `Authorization: Bearer T`), or bind 127.0.0.1"
    )]
    TokenRequired {
        /// The flag that named the address (`--addr`, `--http`).
        flag: &'static str,
        addr: SocketAddr,
    },
    #[error("the token is empty; give a non-empty --token or a --token-file that holds one")]
    EmptyToken,
}

/// Refuses a non-loopback `addr` (named by `flag`) without a token, and an
/// empty token.
pub fn check_bind(
    flag: &'static str,
    addr: SocketAddr,
    token: Option<&str>,
) -> Result<(), BindError> {
    match token {
        Some(token) if token.trim().is_empty() => Err(BindError::EmptyToken),
        Some(_) => Ok(()),
        None if addr.ip().is_loopback() => Ok(()),
        None => Err(BindError::TokenRequired { flag, addr }),
    }
}

/// A `--token-file`'s token: its first line, trimmed.
pub fn read_token_file(file: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read --token-file {}: {e}", file.display()))?;
    Ok(text.lines().next().unwrap_or("").trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_needs_no_token_and_others_do() {
        let local: SocketAddr = "127.0.0.1:7700".parse().unwrap();
        let v6: SocketAddr = "[::1]:7700".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:7700".parse().unwrap();
        let lan: SocketAddr = "192.168.1.2:7700".parse().unwrap();
        assert_eq!(check_bind("--addr", local, None), Ok(()));
        assert_eq!(check_bind("--addr", v6, None), Ok(()));
        assert_eq!(
            check_bind("--addr", any, None),
            Err(BindError::TokenRequired {
                flag: "--addr",
                addr: any
            })
        );
        let lan_refused = check_bind("--http", lan, None).unwrap_err().to_string();
        assert!(lan_refused.starts_with("--http 192.168.1.2:7700 is not a loopback address"));
        assert_eq!(check_bind("--addr", any, Some("s3cret")), Ok(()));
        assert_eq!(
            check_bind("--addr", local, Some("  ")),
            Err(BindError::EmptyToken)
        );
    }
}
