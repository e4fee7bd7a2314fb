use super::*;

fn request(text: &str) -> Input {
    Input {
        request: Request {
            id: "CHG-1".into(),
            requested_by: "dana".into(),
            text: text.into(),
        },
        threshold_cents: 100_000,
    }
}

fn analyze_text(text: &str) -> Result<Analysis, String> {
    OrchAnalyze::run(request(text)).map_err(|e| e.message)
}

#[test]
fn a_restart_in_staging_is_infra_and_not_risky() {
    let a = analyze_text("Restart the search service in staging.").unwrap();
    assert_eq!(a.kind, AgentKind::Infra);
    assert_eq!(a.action.verb, Verb::Restart);
    assert_eq!(a.action.target, "search");
    assert_eq!(a.action.environment.as_deref(), Some("staging"));
    assert_eq!(a.summary, "restart service `search` in staging");
    assert!(!a.risky);
    assert!(a.reasons.is_empty());
}

#[test]
fn each_rule_that_fires_is_a_reason() {
    let a = analyze_text("Decommission legacy-reports in prod").unwrap();
    assert_eq!(a.action.verb, Verb::Delete);
    assert_eq!(a.action.said, "decommission");
    assert_eq!(
        a.reasons,
        ["destructive verb `decommission`", "production environment"]
    );
    assert!(a.risky);

    let a = analyze_text("Refund 1,250.00 EUR to customer C-1042 for invoice INV-2207").unwrap();
    assert_eq!(a.kind, AgentKind::Finance);
    assert_eq!(a.action.amount_cents, Some(125_000));
    assert_eq!(a.action.customer.as_deref(), Some("C-1042"));
    assert_eq!(a.action.target, "INV-2207");
    assert_eq!(
        a.reasons,
        ["amount 1,250.00 EUR over the threshold of 1,000.00 EUR"]
    );
    assert_eq!(
        a.summary,
        "refund 1,250.00 EUR to customer `C-1042` for invoice `INV-2207`"
    );
    // At the threshold is not over it.
    let a = analyze_text("Refund 1000 EUR to customer C-1 for invoice I-1").unwrap();
    assert!(!a.risky);
}

#[test]
fn scale_and_deploy_read_their_details() {
    let a = analyze_text("Scale checkout to 8 replicas in production").unwrap();
    assert_eq!(
        (a.action.target.as_str(), a.action.replicas),
        ("checkout", Some(8))
    );
    assert_eq!(a.reasons, ["production environment"]);
    let a = analyze_text("Deploy version 1.9.0 of the checkout service in staging").unwrap();
    assert_eq!(a.action.version.as_deref(), Some("1.9.0"));
    assert_eq!(a.action.target, "checkout");
    // A name that contains `prod` is a name, not an environment.
    let a = analyze_text("Restart prod-reports in development").unwrap();
    assert_eq!(a.action.target, "prod-reports");
    assert!(!a.risky);
}

#[test]
fn a_request_that_does_not_read_is_refused_saying_what_is_missing() {
    for (text, expected) in [
        ("", "the request's text is empty"),
        (
            "Reboot the search service in staging",
            "unknown verb `Reboot`",
        ),
        (
            "Restart the search service",
            "`restart` needs an environment",
        ),
        ("Restart search in moon", "unknown environment `moon`"),
        ("Scale search in staging", "`scale` needs `to N replicas`"),
        (
            "Scale search to many replicas in staging",
            "the replica count must be a whole number",
        ),
        ("Deploy checkout in staging", "`deploy` needs `version V`"),
        ("Restart the in staging", "`restart` needs a service"),
        (
            "Refund EUR to customer C-1 for invoice I-1",
            "`refund` needs an amount",
        ),
        (
            "Refund 12,50 EUR to customer C-1 for invoice I-1",
            "the amount `12,50` must be digits",
        ),
        (
            "Refund 12.505 EUR to customer C-1 for invoice I-1",
            "at most two decimals",
        ),
        (
            "Refund 12 euros to customer C-1 for invoice I-1",
            "needs its currency",
        ),
        (
            "Refund 12 EUR for invoice I-1",
            "`refund` needs `customer ID`",
        ),
        (
            "Refund 12 EUR to customer C-1",
            "`refund` needs `invoice ID`",
        ),
        (
            "Restart se/arch in staging",
            "service `se/arch` must be letters",
        ),
    ] {
        let err = analyze_text(text).unwrap_err();
        assert!(err.contains(expected), "{text:?}: {err}");
        assert!(err.starts_with("request `CHG-1`: "), "{err}");
    }
    let mut input = request("Restart search in staging");
    input.request.requested_by = " ".into();
    let err = OrchAnalyze::run(input).unwrap_err();
    assert_eq!(err.message, "the request's `requested_by` is empty");
}

#[test]
fn amounts() {
    assert_eq!(parse::cents("0.5"), Ok(50));
    assert_eq!(parse::cents("12,345,678.09"), Ok(1_234_567_809));
    assert!(parse::cents("1,2345").is_err());
    assert!(parse::cents(",100").is_err());
    assert!(parse::cents("99999999999999999999").is_err());
    assert_eq!(money(1_234_567_809), "12,345,678.09");
    assert_eq!(money(5), "0.05");
}
