//! The settings resolved from files, the environment and flags.

use super::*;

fn no_env(_: &str) -> Option<String> {
    None
}

#[test]
fn the_changelog_budget_takes_sizes_and_names_a_bad_one() {
    assert_eq!(parse_size("0"), Some(0));
    assert_eq!(parse_size("4096"), Some(4096));
    assert_eq!(parse_size("512MiB"), Some(512 << 20));
    assert_eq!(parse_size("2 GB"), Some(2 << 30));
    assert_eq!(parse_size("1.5G"), None);
    assert_eq!(parse_size("12 parsecs"), None);
    let defaults = Settings::resolve(FlagSettings::default(), no_env).unwrap();
    assert_eq!(
        defaults.changelog_memory_budget,
        crate::durable::checkpoint::DEFAULT_CHANGELOG_MEMORY_BUDGET
    );
    let env = |k: &str| (k == "CDCFUSION_CHANGELOG_MEMORY_BUDGET").then(|| "64MiB".into());
    let set = Settings::resolve(FlagSettings::default(), env).unwrap();
    assert_eq!(set.changelog_memory_budget, 64 << 20);
    let bad = Settings::resolve(
        FlagSettings {
            changelog_memory_budget: Some("lots".into()),
            ..Default::default()
        },
        env,
    )
    .unwrap_err()
    .to_string();
    assert!(
        bad.contains("\"lots\"") && bad.contains("--changelog-memory-budget"),
        "{bad}"
    );
}

#[test]
fn flags_beat_environment_beat_file_beat_defaults() {
    let dir = std::env::temp_dir().join(format!("cdcfusion-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.toml");
    std::fs::write(
        &file,
        "listen = '127.0.0.1:7000'\nstate_dir = '/var/lib/x'\ninit = ['a.sql']\n",
    )
    .unwrap();
    let defaults = Settings::resolve(FlagSettings::default(), no_env).unwrap();
    assert_eq!(defaults.listen.to_string(), DEFAULT_LISTEN);
    assert_eq!(defaults.state_dir, None);
    let from_file = Settings::resolve(
        FlagSettings {
            config: Some(file.clone()),
            init: vec!["b.sql".into()],
            ..Default::default()
        },
        no_env,
    )
    .unwrap();
    assert_eq!(from_file.listen.to_string(), "127.0.0.1:7000");
    assert_eq!(from_file.state_dir, Some(PathBuf::from("/var/lib/x")));
    assert_eq!(
        from_file.init,
        vec![PathBuf::from("a.sql"), PathBuf::from("b.sql")]
    );
    let env = |k: &str| (k == "CDCFUSION_LISTEN").then(|| "127.0.0.1:7001".to_string());
    let with_env = Settings::resolve(
        FlagSettings {
            config: Some(file.clone()),
            ..Default::default()
        },
        env,
    )
    .unwrap();
    assert_eq!(with_env.listen.to_string(), "127.0.0.1:7001");
    let with_flag = Settings::resolve(
        FlagSettings {
            config: Some(file.clone()),
            listen: Some("127.0.0.1:7002".into()),
            ..Default::default()
        },
        env,
    )
    .unwrap();
    assert_eq!(with_flag.listen.to_string(), "127.0.0.1:7002");
    std::fs::write(&file, "lisen = '127.0.0.1:1'\n").unwrap();
    let err = Settings::resolve(
        FlagSettings {
            config: Some(file.clone()),
            ..Default::default()
        },
        no_env,
    )
    .unwrap_err();
    assert!(err.to_string().contains("lisen"), "{err}");
    let err = Settings::resolve(
        FlagSettings {
            listen: Some("nowhere".into()),
            ..Default::default()
        },
        no_env,
    )
    .unwrap_err();
    assert!(err.to_string().contains("--listen"), "{err}");
    let interval = |k: &str| (k == "CDCFUSION_CHECKPOINT_INTERVAL").then(|| "250ms".to_string());
    assert_eq!(
        Settings::resolve(FlagSettings::default(), interval)
            .unwrap()
            .checkpoint_interval,
        Duration::from_millis(250)
    );
    let err = Settings::resolve(
        FlagSettings {
            checkpoint_interval: Some("soon".into()),
            ..Default::default()
        },
        no_env,
    )
    .unwrap_err();
    assert!(err.to_string().contains("--checkpoint-interval"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn frontend_settings_from_file_and_environment() {
    let dir = tempfile_dir("frontend");
    let file = dir.join("c.toml");
    std::fs::write(
        &file,
        "auth = 'md5'\nmax_connections = 3\nidle_session_timeout_ms = 500\n\
         [[users]]\nname = 'ann'\npassword = 'x'\n\
         [[users]]\nname = 'bob'\npassword = 'y'\nmethod = 'scram-sha-256'\nrole = 'admin'\n",
    )
    .unwrap();
    let flags = || FlagSettings {
        config: Some(file.clone()),
        ..Default::default()
    };
    let s = Settings::resolve(flags(), no_env).unwrap().frontend;
    assert_eq!(s.auth, AuthMethod::Md5);
    assert_eq!(s.max_connections, 3);
    assert_eq!(s.idle_session_timeout, Some(Duration::from_millis(500)));
    assert_eq!(s.statement_timeout, None);
    assert_eq!(s.users.len(), 2);
    assert_eq!(s.users[1].method, Some(AuthMethod::ScramSha256));
    assert_eq!(
        (s.users[0].role, s.users[1].role),
        (None, Some(Role::Admin))
    );
    assert_eq!(s.query_memory_limit, DEFAULT_QUERY_MEMORY_LIMIT);
    assert_eq!(s.max_result_size, 0);
    // The environment's user joins them; the environment's method wins.
    let env = |k: &str| match k {
        "CDCFUSION_USER" => Some("ci".to_string()),
        "CDCFUSION_PASSWORD" => Some("secret".to_string()),
        "CDCFUSION_AUTH" => Some("trust".to_string()),
        _ => None,
    };
    let s = Settings::resolve(flags(), env).unwrap().frontend;
    assert_eq!(s.auth, AuthMethod::Trust);
    assert_eq!(s.users.last().unwrap().name, "ci");
    assert_eq!(s.users.last().unwrap().role, Some(Role::Admin));
    assert!(
        !format!("{:?}", s.users).contains("secret"),
        "passwords stay out of logs"
    );
    // A user without a password, or a bad method, is refused.
    let env = |k: &str| (k == "CDCFUSION_USER").then(|| "ci".to_string());
    assert!(Settings::resolve(flags(), env).is_err());
    let env = |k: &str| (k == "CDCFUSION_AUTH").then(|| "plain".to_string());
    let err = Settings::resolve(flags(), env).unwrap_err();
    assert!(err.to_string().contains("plain"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_metrics_endpoint_is_off_unless_an_address_is_given() {
    assert_eq!(
        Settings::resolve(FlagSettings::default(), no_env)
            .unwrap()
            .metrics_listen,
        None
    );
    let env = |k: &str| (k == "CDCFUSION_METRICS_LISTEN").then(|| "127.0.0.1:9464".to_string());
    let on = Settings::resolve(FlagSettings::default(), env).unwrap();
    assert_eq!(on.metrics_listen, Some("127.0.0.1:9464".parse().unwrap()));
    let err = Settings::resolve(
        FlagSettings {
            metrics_listen: Some("9464".into()),
            ..Default::default()
        },
        no_env,
    )
    .unwrap_err();
    assert!(err.to_string().contains("--metrics-listen"), "{err}");
}

#[test]
fn allowed_locations_from_file() {
    let dir = tempfile_dir("locations");
    let file = dir.join("c.toml");
    let flags = || FlagSettings {
        config: Some(file.clone()),
        ..Default::default()
    };
    std::fs::write(&file, "").unwrap();
    let none = Settings::resolve(flags(), no_env)
        .unwrap()
        .allowed_locations;
    assert!(none.is_empty() && !none.allows("/tmp/x.csv"));
    std::fs::write(
        &file,
        "allowed_locations = ['s3://bucket/prefix/', 'file:///data/exports/']\n",
    )
    .unwrap();
    let some = Settings::resolve(flags(), no_env)
        .unwrap()
        .allowed_locations;
    assert!(some.allows("/data/exports/x.csv") && some.allows("s3://bucket/prefix/y"));
    assert!(!some.allows("/data/x.csv"));
    std::fs::write(&file, "allowed_locations = ['exports/']\n").unwrap();
    let err = Settings::resolve(flags(), no_env).unwrap_err();
    assert!(err.to_string().contains("allowed_locations"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn tempfile_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cdcfusion-config-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn query_limits_and_roles_are_checked() {
    let dir = tempfile_dir("limits");
    let file = dir.join("c.toml");
    let flags = || FlagSettings {
        config: Some(file.clone()),
        ..Default::default()
    };
    std::fs::write(
        &file,
        "query_memory_limit = '64MiB'\nmax_result_size = '1 GiB'\nmax_statement_size = '64KiB'\n",
    )
    .unwrap();
    let s = Settings::resolve(flags(), no_env).unwrap().frontend;
    assert_eq!(
        (
            s.query_memory_limit,
            s.max_result_size,
            s.max_statement_size
        ),
        (64 << 20, 1 << 30, 64 << 10)
    );
    std::fs::write(&file, "query_memory_limit = 'lots'\n").unwrap();
    let err = Settings::resolve(flags(), no_env).unwrap_err();
    assert!(err.to_string().contains("query_memory_limit"), "{err}");
    std::fs::write(
        &file,
        "[[users]]\nname = 'ann'\npassword = 'x'\nrole = 'root'\n",
    )
    .unwrap();
    let err = Settings::resolve(flags(), no_env).unwrap_err();
    assert!(err.to_string().contains("root"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
