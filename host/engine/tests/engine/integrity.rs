//! What the engine refuses to store or to trust: a node whose changes nest
//! deeper than the store keeps fails (and nothing recursive touches its
//! value); a resume refuses a run whose stored history was edited in the
//! database (its next nodes, its visit counts, its input), naming the run,
//! the seq and what no longer matches, on SQLite and Postgres.

use serde_json::json;
use skillhost_engine::{EngineError, Event};
use sqlx::Connection;

use crate::{Db, completed, crash, e2e_scenario, failed, load, resume, run_both, scenario};

#[tokio::test]
async fn a_value_nested_deeper_than_the_store_keeps_fails_its_node() {
    let loaded = load(&scenario("nesting"));
    // Below the limit: stored and read back as it was.
    let (ran, db) = run_both(&loaded, json!({ "rounds": 99 })).await;
    completed(&ran);
    let stored = db.store.latest_state(&ran.outcome.run_id).await.unwrap();
    assert_eq!(stored.unwrap().state["round"], 99);

    let (ran, db) = run_both(&loaded, json!({ "rounds": 150 })).await;
    failed(&ran);
    let error = ran.last_error();
    assert_eq!(error["code"], "output-too-deep", "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.starts_with("node `wrap`: the value written to state field `tree` nests")
            && message.contains("more than 100 levels deep"),
        "{message}"
    );
    // `tree` starts at one level and gains one a round: round 100 would
    // have made it 101 deep. The 99 rounds before it were stored; the
    // refused value never was.
    assert_eq!(ran.state()["round"], 99);
    let row = db.store.run(&ran.outcome.run_id).await.unwrap().unwrap();
    assert!(row.result.is_some());
    let last = db.store.latest_state(&ran.outcome.run_id).await.unwrap();
    assert_eq!(last.unwrap().state["round"], 99);
}

/// Runs `crash`'s scenario until its checkpoint after `second` is written,
/// edits the run with `sql` (`{run}` is its id) and resumes it.
async fn edit_and_resume(db: &Db, sql: &str) -> (String, EngineError) {
    let loaded = load(&e2e_scenario("crash"));
    let run_id = crash(
        &db.url,
        &loaded,
        json!({}),
        |e| matches!(e, Event::CheckpointWritten { node, .. } if node == "second"),
    )
    .await;
    let sql = sql.replace("{run}", &run_id);
    if db.url.starts_with("sqlite:") {
        let mut conn = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
        sqlx::raw_sql(&sql).execute(&mut conn).await.unwrap();
    } else {
        let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
        sqlx::raw_sql(&sql).execute(&mut conn).await.unwrap();
    }
    let error = resume(db.reopen().await, &loaded, &run_id)
        .await
        .err()
        .expect("an edited run is not resumed");
    (run_id, error)
}

async fn an_edited_run_is_not_resumed(db: impl AsyncFn() -> Db) {
    // `second` is checkpoint 2 of the crash scenario.
    for (sql, what, detail) in [
        (
            // Skipping the rest of the run (and whatever checks it makes).
            "UPDATE checkpoints SET next_nodes = '[]' WHERE run_id = '{run}' AND seq = 2",
            "checkpoint 2 of run `{run}`",
            "its next nodes",
        ),
        (
            "UPDATE checkpoints SET visits = '{}' WHERE run_id = '{run}' AND seq = 2",
            "checkpoint 2 of run `{run}`",
            "its visit counts",
        ),
        (
            "UPDATE checkpoints SET changes = '[]' WHERE run_id = '{run}' AND seq = 2",
            "checkpoint 2 of run `{run}`",
            "its changes",
        ),
        (
            "UPDATE runs SET input = '{\"other\": 1}' WHERE id = '{run}'",
            "run `{run}`",
            "its input",
        ),
    ] {
        let db = db().await;
        let (run_id, error) = edit_and_resume(&db, sql).await;
        let message = error.to_string();
        let what = what.replace("{run}", &run_id);
        assert!(
            matches!(&error, EngineError::Store(e) if e.is_corrupt()),
            "{message}"
        );
        assert!(message.contains(&format!("corrupt {what}")), "{message}");
        assert!(message.contains(detail), "{message}");
        // Refused before anything ran: the run is where it was.
        let row = db.reopen().await.run(&run_id).await;
        if let Ok(Some(row)) = row {
            assert_eq!(row.last_seq, 2);
        }
    }
}

#[tokio::test]
async fn an_edited_run_is_not_resumed_on_sqlite() {
    an_edited_run_is_not_resumed(Db::sqlite).await;
}

#[tokio::test]
async fn an_edited_run_is_not_resumed_on_postgres() {
    an_edited_run_is_not_resumed(Db::postgres).await;
}
