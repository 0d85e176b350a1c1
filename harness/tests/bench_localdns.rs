//! `harness bench localdns` and `harness bench supervisor-idle` as a person runs them, briefly
//! (one-second rounds), with `--output json`: the figures parse and hold up — every setup answered
//! queries, the ratios are finite, our NOTRACK rules leave fewer conntrack entries than no rules,
//! the supervisor's CPU is there for every round and a look has a cost. They run on this host in
//! network namespaces; each needs root, nft, conntrack, ss, the CoreDNS artifact (`harness images
//! build`) and the supervisor built beside the harness binary (`cargo build -p agent --bins`, or
//! the whole workspace as the scripts build it): without one, the command fails naming it, and so
//! does the test.

use std::process::Command;

use serde_json::Value;

static HARNESS: std::sync::LazyLock<std::path::PathBuf> =
    std::sync::LazyLock::new(|| agent::test_binary!("harness"));

/// Runs `harness bench <args> --output json`; its JSON, or a panic with its stderr.
fn bench_json(args: &[&str]) -> Value {
    let output = Command::new(&*HARNESS)
        .arg("bench")
        .args(args)
        .args(["--output", "json"])
        .output()
        .unwrap_or_else(|e| panic!("starting {}: {e}", HARNESS.display()));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "`harness bench {}` failed ({}):\n{stderr}",
        args.join(" "),
        output.status
    );
    // The round lines (stderr) and the figures, for the test's output.
    eprintln!("{stderr}{}", String::from_utf8_lossy(&output.stdout));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "`harness bench {}` printed no JSON ({e}):\n{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// `value[key]` as a finite number.
fn number(value: &Value, key: &str) -> f64 {
    let n = value[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {value}"));
    assert!(n.is_finite(), "{key} = {n} in {value}");
    n
}

#[test]
fn bench_localdns_gives_throughput_for_each_setup_and_finite_ratios() {
    let report = bench_json(&["localdns", "--seconds", "1", "--threads", "1"]);
    let rounds = report["rounds"].as_array().expect("rounds");
    let setups: Vec<&str> = rounds.iter().map(|r| r["setup"].as_str().unwrap()).collect();
    assert_eq!(
        setups,
        [
            "ours_with_rules",
            "ours_without_rules",
            "bare",
            "ours_with_rules",
            "ours_without_rules",
            "bare"
        ],
        "{report}"
    );
    for round in rounds {
        assert!(number(round, "queries_per_second") > 0.0, "{round}");
        assert!(number(round, "queries") > 0.0, "{round}");
        assert!(number(round, "p50_us") <= number(round, "p99_us"), "{round}");
        assert!(number(round, "peak_rss_mib") > 0.0, "{round}");
        assert!(number(round, "cpu_millicores") > 0.0, "{round}");
        number(round, "cpu_percent_of_limit");
        number(round, "max_conntrack");
    }
    let setups = report["setups"].as_array().expect("setups");
    assert_eq!(setups.len(), 3, "{report}");
    for setup in setups {
        assert!(number(setup, "queries_per_second") > 0.0, "{setup}");
        assert!(number(setup, "cpu_millicores") > 0.0, "{setup}");
    }
    for ratio in [
        "with_rules_over_without_rules",
        "with_rules_over_bare",
        "without_rules_over_bare",
    ] {
        assert!(number(&report["ratios"], ratio) > 0.0, "{report}");
    }
    // Conntrack's most entries: each query of the rounds without rules is a flow; with our rules
    // none is (what is left is CoreDNS's own refreshes from the upstream, if any).
    let most = |setup: &str| {
        rounds
            .iter()
            .filter(|r| r["setup"] == setup)
            .map(|r| number(r, "max_conntrack"))
            .fold(0.0, f64::max)
    };
    assert!(
        most("ours_with_rules") < most("ours_without_rules") && most("ours_without_rules") > 0.0,
        "conntrack entries: {} with our rules, {} without\n{report}",
        most("ours_with_rules"),
        most("ours_without_rules")
    );
}

#[test]
fn bench_supervisor_idle_gives_cpu_per_round_and_the_cost_of_a_look() {
    let sockets = 50;
    let report = bench_json(&[
        "supervisor-idle",
        "--seconds",
        "1",
        "--sockets",
        &sockets.to_string(),
    ]);
    assert!(number(&report, "clock_ticks_per_second") > 0.0, "{report}");
    let rounds = report["rounds"].as_array().expect("rounds");
    let rule: Vec<bool> = rounds
        .iter()
        .map(|r| r["queue_rule_on"].as_bool().unwrap())
        .collect();
    assert_eq!(rule, [true, false, true, false], "{report}");
    for round in rounds {
        assert!(number(round, "cpu_millicores") >= 0.0, "{round}");
        number(round, "cpu_ticks");
    }
    let listed: Vec<f64> = rounds.iter().map(|r| number(r, "sockets_listed")).collect();
    assert!(
        listed[2] >= f64::from(sockets) && listed[2] > listed[0] && listed[3] == listed[2],
        "sockets listed per round {listed:?} with {sockets} opened for the last two\n{report}"
    );
    let looks = report["looks"].as_array().expect("looks");
    assert_eq!(looks.len(), 2, "{report}");
    for look in looks {
        assert!(number(look, "one_look_us") > 0.0, "{look}");
        assert!(number(look, "millicores_at_look_interval") > 0.0, "{look}");
    }
}
