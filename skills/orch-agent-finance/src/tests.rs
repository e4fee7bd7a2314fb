use super::*;
use skillhost_sdk::testing;

fn refund(cents: u64, customer: &str, invoice: &str) -> Result<Execution, SkillError> {
    testing::set_fs_root(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/approval/inputs"
    ));
    OrchAgentFinance::run(Input {
        action: Action {
            verb: Verb::Refund,
            said: "refund".into(),
            target: invoice.into(),
            environment: None,
            replicas: None,
            version: None,
            amount_cents: Some(cents),
            currency: Some("EUR".into()),
            customer: Some(customer.into()),
        },
        attempt: 0,
    })
}

#[test]
fn a_refund_posts_to_the_ledger_and_raises_the_invoice_refunded() {
    let e = refund(125_000, "C-1042", "INV-2207").unwrap();
    assert!(e.ok);
    assert_eq!(
        e.operations,
        [
            "debit account `refunds` 1,250.00 EUR",
            "credit customer `C-1042` 1,250.00 EUR"
        ]
    );
    let c = &e.changes[0];
    assert_eq!(
        (c.subject.as_str(), c.before.as_str(), c.after.as_str()),
        ("invoice INV-2207", "400.00 EUR", "1,650.00 EUR")
    );
}

#[test]
fn a_refund_over_what_is_left_is_refused_and_not_retryable() {
    let e = refund(150_000, "C-1042", "INV-2207").unwrap();
    assert!(!e.ok && !e.retryable);
    assert_eq!(
        e.error,
        "a refund of 1,500.00 EUR is more than the 1,490.00 EUR left to refund on invoice `INV-2207` \
         (1,890.00 invoiced, 400.00 refunded)"
    );
    assert!(e.operations.is_empty());
}

#[test]
fn a_refund_the_invoices_do_not_match_is_an_error() {
    let err = refund(100, "C-9", "INV-2207").unwrap_err();
    assert_eq!(
        err.message,
        "invoice `INV-2207` is customer `C-1042`'s, in EUR; the request says customer `C-9`, in EUR"
    );
    let err = refund(100, "C-9", "INV-1").unwrap_err();
    assert_eq!(
        err.message,
        "no invoice `INV-1` in `inventory.json`; it has: INV-2207, INV-2214"
    );
}
