//! `host checkpoints`: the checkpoint history of one run.

use clap::Args;
use serde_json::json;

use super::common::{
    CliResult, DatabaseArgs, fetch_run, print_json, shown, store_error, tokio_runtime,
};
use skillhost_store::FIELD_HASH_PREFIX;

#[derive(Debug, Args)]
pub struct CheckpointsArgs {
    /// The run id (see `host runs list`).
    run_id: String,
    #[command(flatten)]
    db: DatabaseArgs,
    /// Print the checkpoints as a JSON array.
    #[arg(long)]
    json: bool,
}

pub fn checkpoints(args: CheckpointsArgs) -> CliResult {
    let rt = tokio_runtime()?;
    rt.block_on(async {
        let store = args.db.open_for_run(&args.run_id).await?;
        fetch_run(&store, &args.run_id).await?;
        let rows = store.checkpoints(&args.run_id).await.map_err(store_error)?;
        if args.json {
            return print_json(
                &rows
                    .iter()
                    .map(|c| {
                        json!({
                            "seq": c.seq, "node": c.node_id, "next": c.next_nodes,
                            "state_hash": c.state_hash, "snapshot": c.is_snapshot,
                            "bytes": c.bytes, "created_at_ms": c.created_at_ms,
                        })
                    })
                    .collect::<Vec<_>>(),
            );
        }
        println!(
            "{:>4}  {:<24} {:<24} {:<8} {:>8}  state",
            "seq", "node", "next", "kind", "bytes"
        );
        for c in rows {
            println!(
                "{:>4}  {:<24} {:<24} {:<8} {:>8}  {}",
                c.seq,
                if c.node_id.is_empty() {
                    "(start)".into()
                } else {
                    shown(&c.node_id)
                },
                shown(&c.next_nodes.join(",")),
                if c.is_snapshot { "snapshot" } else { "delta" },
                c.bytes,
                short_hash(&c.state_hash)
            );
        }
        Ok(())
    })
}

/// A checkpoint hash's first 16 hex digits, labelled with its version:
/// `sha256:` for version 1 (the SHA-256 of the whole state), `f2:` for
/// version 2 (per field, see `store::FieldHashes`).
fn short_hash(hash: &str) -> String {
    let (label, hex) = match hash.strip_prefix(FIELD_HASH_PREFIX) {
        Some(hex) => (FIELD_HASH_PREFIX, hex),
        None => ("sha256:", hash),
    };
    format!("{label}{}", hex.get(..16).unwrap_or(hex))
}
