//! Guest languages, one recipe each; Rust is the one there is.

pub mod rust;
