use super::*;
use skillhost_sdk::testing;

/// The example's inventory, the file the scenario grants.
fn inventory_root() {
    testing::set_fs_root(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/approval/inputs"
    ));
}

fn action(verb: Verb, target: &str, environment: &str) -> Action {
    Action {
        verb,
        said: format!("{verb:?}").to_lowercase(),
        target: target.into(),
        environment: Some(environment.into()),
        replicas: None,
        version: None,
        amount_cents: None,
        currency: None,
        customer: None,
    }
}

fn run(action: Action, batch_size: u32) -> Result<Execution, SkillError> {
    inventory_root();
    OrchAgentInfra::run(Input {
        action,
        batch_size,
        attempt: 0,
    })
}

#[test]
fn a_restart_rolls_the_replicas_in_batches_the_service_allows() {
    let e = run(action(Verb::Restart, "search", "staging"), 2).unwrap();
    assert!(e.ok, "{}", e.error);
    assert_eq!(
        e.operations,
        [
            "batch 1/2: restart search-0, search-1",
            "batch 2/2: restart search-2, search-3"
        ]
    );
    assert_eq!(e.changes[0].field, "replicas restarted");
    assert_eq!(
        (e.changes[0].before.as_str(), e.changes[0].after.as_str()),
        ("0 of 4", "4 of 4")
    );
}

#[test]
fn a_batch_over_max_unavailable_is_refused_and_retryable_while_a_smaller_one_fits() {
    let e = run(action(Verb::Restart, "search", "staging"), 4).unwrap();
    assert!(!e.ok);
    assert!(e.retryable);
    assert_eq!(
        e.error,
        "a batch of 4 would take 4 of the 4 replica(s) of `search` down at once; it allows 2"
    );
    assert!(e.operations.is_empty() && e.changes.is_empty());
    // `ledger-db` allows one replica down: a batch of 1 fits.
    let e = run(action(Verb::Restart, "ledger-db", "staging"), 1).unwrap();
    assert!(e.ok);
    assert_eq!(e.operations.len(), 5);
}

#[test]
fn deploy_scale_and_delete_change_what_they_say() {
    let mut deploy = action(Verb::Deploy, "checkout", "production");
    deploy.version = Some("1.9.0".into());
    let e = run(deploy.clone(), 2).unwrap();
    assert_eq!(e.operations.len(), 3);
    assert_eq!(
        (e.changes[0].before.as_str(), e.changes[0].after.as_str()),
        ("1.8.2", "1.9.0")
    );
    deploy.version = Some("1.8.2".into());
    let e = run(deploy, 2).unwrap();
    assert!(!e.ok && !e.retryable);
    assert_eq!(e.error, "service `checkout` already runs version 1.8.2");

    let mut scale = action(Verb::Scale, "search", "staging");
    scale.replicas = Some(6);
    let e = run(scale.clone(), 4).unwrap();
    assert_eq!(e.operations, ["scale `search` from 4 to 6 replica(s)"]);
    scale.replicas = Some(0);
    let e = run(scale, 4).unwrap();
    assert!(!e.ok && !e.retryable);
    assert!(e.error.contains("ask to delete it instead"), "{}", e.error);

    let e = run(action(Verb::Delete, "legacy-reports", "production"), 4).unwrap();
    assert!(e.ok);
    let changes: Vec<(&str, &str, &str)> = e
        .changes
        .iter()
        .map(|c| (c.field.as_str(), c.before.as_str(), c.after.as_str()))
        .collect();
    assert_eq!(changes, [("replicas", "2", "0"), ("exists", "yes", "no")]);
}

#[test]
fn an_action_the_inventory_does_not_have_is_an_error() {
    let err = run(action(Verb::Restart, "web", "staging"), 2).unwrap_err();
    assert_eq!(err.code, "invalid-input");
    assert_eq!(
        err.message,
        "no service `web` in `inventory.json`; it has: checkout, legacy-reports, search, ledger-db"
    );
    let err = run(action(Verb::Restart, "search", "production"), 2).unwrap_err();
    assert_eq!(
        err.message,
        "service `search` runs in staging, not production"
    );
    let err = run(action(Verb::Refund, "INV-1", "staging"), 2).unwrap_err();
    assert!(err.message.contains("finance agent's"), "{}", err.message);
    let err = run(action(Verb::Restart, "search", "staging"), 0).unwrap_err();
    assert!(err.message.contains("`batch_size` is 0"), "{}", err.message);
    testing::clear_fs_root();
    let err = OrchAgentInfra::run(Input {
        action: action(Verb::Restart, "search", "staging"),
        batch_size: 1,
        attempt: 0,
    })
    .unwrap_err();
    assert_eq!(err.code, "capability-not-granted");
}
