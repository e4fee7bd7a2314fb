//! Database URLs: which backend, where, and how to show it without secrets.

use std::path::PathBuf;

use super::error::StoreError;

/// A parsed `--database` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DatabaseUrl {
    /// `sqlite://PATH` or `sqlite:PATH`; the path is relative to the current
    /// directory unless absolute (`sqlite:///abs/path`).
    Sqlite { path: PathBuf },
    /// `postgres://…` or `postgresql://…`, as libpq and sqlx read it.
    Postgres { url: String },
}

impl DatabaseUrl {
    pub fn parse(url: &str) -> Result<DatabaseUrl, StoreError> {
        let unsupported = |hint: &str| StoreError::UnsupportedUrl {
            url: redact(url),
            hint: hint.to_owned(),
        };
        if let Some(rest) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            if rest.is_empty() || rest == ":memory:" || rest.contains('?') {
                return Err(unsupported(
                    "give the SQLite file's path, e.g. sqlite://.skillhost/skillhost.db \
                     (in-memory databases and URL options are not supported)",
                ));
            }
            return Ok(DatabaseUrl::Sqlite {
                path: PathBuf::from(rest),
            });
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            // Checked here so a typo fails before any connection attempt. The
            // parser's own message may quote the URL, so it is not passed on.
            let (bare, _) =
                crate::postgres::pooler::take_option(url).map_err(|hint| unsupported(&hint))?;
            if bare.parse::<sqlx::postgres::PgConnectOptions>().is_err() {
                return Err(unsupported(
                    "it is not a valid Postgres URL; use postgres://USER:PASSWORD@HOST:PORT/DATABASE",
                ));
            }
            return Ok(DatabaseUrl::Postgres {
                url: url.to_owned(),
            });
        }
        let accepted = "use sqlite://PATH (e.g. sqlite://.skillhost/skillhost.db) or \
                        postgres://USER:PASSWORD@HOST:PORT/DATABASE";
        Err(match url.split_once("://") {
            Some((scheme, _)) => unsupported(&format!(
                "the scheme `{scheme}://` is not supported; {accepted}"
            )),
            None => unsupported(&format!("it names no scheme; {accepted}")),
        })
    }
}

/// The URL with any password replaced by `***`, for messages and logs.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let authority_start = scheme_end + 3;
    let authority_end = url[authority_start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| authority_start + i);
    let authority = &url[authority_start..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &authority[..at];
    let Some(colon) = userinfo.find(':') else {
        return url.to_owned();
    };
    format!(
        "{}{}:***{}",
        &url[..authority_start],
        &userinfo[..colon],
        &url[authority_start + at..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sqlite_urls() {
        assert_eq!(
            DatabaseUrl::parse("sqlite://.skillhost/skillhost.db").unwrap(),
            DatabaseUrl::Sqlite {
                path: ".skillhost/skillhost.db".into()
            }
        );
        assert_eq!(
            DatabaseUrl::parse("sqlite:///tmp/x.db").unwrap(),
            DatabaseUrl::Sqlite {
                path: "/tmp/x.db".into()
            }
        );
        assert_eq!(
            DatabaseUrl::parse("sqlite:x.db").unwrap(),
            DatabaseUrl::Sqlite {
                path: "x.db".into()
            }
        );
        assert!(DatabaseUrl::parse("sqlite://").is_err());
        let error = DatabaseUrl::parse("mysql://localhost/x")
            .unwrap_err()
            .to_string();
        assert!(error.contains("`mysql://`"), "{error}");
        assert!(
            error.contains("sqlite://") && error.contains("postgres://"),
            "{error}"
        );
    }

    #[test]
    fn never_shows_passwords() {
        assert_eq!(
            redact("postgres://app:s3cret@db.example:5432/runs?sslmode=require"),
            "postgres://app:***@db.example:5432/runs?sslmode=require"
        );
        assert_eq!(redact("postgres://app@db/runs"), "postgres://app@db/runs");
        assert_eq!(redact("sqlite://a/b.db"), "sqlite://a/b.db");
        assert_eq!(
            DatabaseUrl::parse("postgres://u:pw@h/d").unwrap(),
            DatabaseUrl::Postgres {
                url: "postgres://u:pw@h/d".into()
            }
        );
        let error = DatabaseUrl::parse("postgres://u:pw@h:notaport/d")
            .unwrap_err()
            .to_string();
        assert!(!error.contains("pw@"), "{error}");
        assert!(error.contains("u:***@h"), "{error}");
    }
}
