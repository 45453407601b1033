use super::{Encoding, Limits, SizeError, Verdict, check, program_size, program_size_with};

/// `(regex, RE2 program size)`: every size is what Envoy 1.40 printed for the
/// regex in `envoy --mode validate` with `re2.max_program_size.error_level: 1`
/// ("RE2 program size of N > max program size of 1"); a size of 1 is a regex
/// Envoy accepted at that level (a program that can match nothing, such as a
/// Greek class in Latin-1). Literals, case folding, classes (Unicode, POSIX,
/// Perl, negated), `.`, anchors, `\b`, alternations (factored), `*`, `+`, `?`,
/// `{n,m}`, nested groups, the regexes of Istio's stats tags and of the corpus's
/// routes and virtual hosts.
const ENVOY_SIZES: &[(&str, u32)] = &[
    (r#"a"#, 5),
    (r#"abc"#, 7),
    (r#"a{200}"#, 204),
    (r#"((a{10}){10}){10}"#, 1224),
    (r#"^abc$"#, 4),
    (r#"^abc"#, 4),
    (r#"abc$"#, 7),
    (r#"(?i)abc"#, 7),
    (r#"(?i)k"#, 5),
    (r#"[a-z]"#, 5),
    (r#"[^a]"#, 6),
    (r#"."#, 6),
    (r#".*"#, 6),
    (r#".+"#, 7),
    (r#"a*"#, 5),
    (r#"a+"#, 6),
    (r#"a?"#, 6),
    (r#"a{2,5}"#, 12),
    (r#"a{3}"#, 7),
    (r#"a{2,}"#, 7),
    (r#"\d+"#, 6),
    (r#"\w+"#, 8),
    (r#"\s"#, 7),
    (r#"\b"#, 5),
    (r#"\bfoo\b"#, 9),
    (r#"foo|bar"#, 10),
    (r#"foo|foa"#, 8),
    (r#"a|b|c"#, 5),
    (r#"(a|b)+"#, 8),
    (r#"((a)(b))"#, 12),
    (r#"\pL"#, 11),
    (r#"\p{Greek}"#, 1),
    (r#"[^\n]"#, 6),
    (r#"(?s)."#, 5),
    (r#"é"#, 6),
    (r#"日本"#, 10),
    (r#"/api/v1/.*"#, 14),
    (r#"/users/[0-9]+/orders"#, 20),
    (r#"^/v1/(.*)/items$"#, 14),
    (r#".*\.(jpg|png|gif)$"#, 18),
    (r#"(?i)Bearer .+"#, 14),
    (r#"a*a+"#, 6),
    (r#"aa*"#, 6),
    (r#"a+a"#, 7),
    (r#"a*a"#, 6),
    (r#"a?a?"#, 8),
    (r#"aaa*b"#, 8),
    (r#"a{2}a*"#, 7),
    (r#"(?:ab)*"#, 6),
    (r#"(?:ab)+c"#, 8),
    (r#"x*y*"#, 7),
    (r#"a|"#, 6),
    (r#"|a"#, 6),
    (r#"a||b"#, 7),
    (r#"(a|)"#, 8),
    (r#"abc|abd|aef"#, 9),
    (r#"abc|abd|xyz|xya"#, 11),
    (r#"[ab]c|[ab]d"#, 6),
    (r#"a+|a+b"#, 12),
    (r#"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}"#, 27),
    (r#"(\d{1,3}\.){3}\d{1,3}"#, 33),
    (
        r#"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"#,
        72,
    ),
    (r#"[A-Za-z0-9_-]+"#, 9),
    (r#"[[:alpha:]]+"#, 6),
    (r#"[[:^alpha:]]"#, 7),
    (r#"\S+"#, 9),
    (r#"\W"#, 9),
    (r#"(?i)[^a-z]"#, 7),
    (r#"(?i)hello world"#, 15),
    (r#"(?i)HeLLo"#, 9),
    (r#"(?m)^a$"#, 7),
    (r#"a^b"#, 7),
    (r#"a$b"#, 7),
    (r#"(?s).*"#, 6),
    (r#".*?"#, 6),
    (r#"a+?"#, 6),
    (r#"a*?b"#, 6),
    (r#"(?U)a*"#, 5),
    (r#"[a-z]{1,63}"#, 129),
    (r#"[a-z][a-z0-9-]{0,61}[a-z0-9]"#, 251),
    (r#"/api/(v1|v2)/users/\d+"#, 22),
    (r#"^/api/v[0-9]+/.*$"#, 9),
    (r#"^.*$"#, 4),
    (r#"^$"#, 2),
    (r#"(a)(b)(c)(d)"#, 16),
    (r#"((((a))))"#, 13),
    (r#"(?P<name>x+)"#, 8),
    (r#"\Aab\z"#, 4),
    (r#"\Bx\B"#, 7),
    (r#"[\s\S]"#, 5),
    (r#"[^\s\S]"#, 1),
    (r#"[\w\-.]+@[\w\-.]+"#, 15),
    (r#"^(/[^/]+)+/?$"#, 11),
    (r#"(?i)^(GET|POST|PUT)$"#, 13),
    (r#"GET|POST|PUT|DELETE|PATCH"#, 24),
    (r#"^(foo|bar|baz)[0-9]*$"#, 12),
    (r#"(?:(?:a|b)|c)"#, 5),
    (r#"\.(css|js|png|jpe?g|gif|svg|woff2?)$"#, 32),
    (r#".*\.svc\.cluster\.local$"#, 24),
    (r#"^[^.]+\.example\.com$"#, 17),
    (r#"^(.*)\.(.*)$"#, 11),
    (r#"x{0}"#, 4),
    (r#"x{0,0}y"#, 5),
    (r#"(ab){2,3}"#, 17),
    (r#"(?:a{2}){3}"#, 10),
    (r#"a{1000}"#, 1004),
    (r#"\pN+"#, 9),
    (r#"\p{Lu}"#, 7),
    (r#"[\pL\pN]"#, 14),
    (r#"[^\pL]"#, 12),
    (r#"(?i)\pL"#, 11),
    (r#"[\x00-\x7f]"#, 5),
    (r#"[^\x00-\x7f]"#, 5),
    (r#"\x{41}\x42"#, 6),
    (r#"[\n\t]"#, 5),
    (r#"(?i)[k]"#, 5),
    (r#"[Kk]"#, 5),
    (r#"[aA]"#, 5),
    (r#"[aAb]"#, 6),
    (r#"[^aA]"#, 7),
    (r#"ab*c+d?"#, 11),
    (
        r#"http.[0-9]*\.[0-9]*\.[0-9]*\.[0-9]*_8080.downstream_rq_time"#,
        42,
    ),
    (r#"vhost\..*\.route\..*"#, 21),
    (
        r#"(?i)^(localhost|localhost\.localdomain|ip6-localhost|ip6-loopback|127\.0\.0\.1|::1|\[::1\])\.?$"#,
        64,
    ),
    (r#"(\.istio_dry_run_(allow|deny)_)"#, 33),
    (r#"(\.shadow_(allowed|denied))"#, 29),
    (r#"(cache\.(.+?)\.)"#, 18),
    (r#"(dlp_error=\.=(.*?);\.;)"#, 25),
    (r#"(tag\.(.+?);\.)"#, 17),
    (r#"\.zone(\.(([^\.]+)\.))"#, 20),
    (r#"\.zone\.[^\.]+\.(([^\.]+)\.)"#, 22),
    (r#".*\.trusted\.com"#, 18),
    (r#"^/.*$"#, 6),
    (r#"^/\$env\/*"#, 5),
    (r#"^/admin(\?.*|#.*|;.*|$)"#, 19),
    (r#"^/node/([0-9]+)/api.*"#, 14),
    (r#"^/public(/.*|\?.*|#.*|;.*|$)"#, 23),
    (r#"^/service/([^/]+)(/.*)$"#, 14),
    (r#"^127\.0\.0\.1(?::\d+)?$"#, 9),
    (r#"^\[::1\](?::\d+)?$"#, 9),
    (r#"^cluster(\.(.+);)"#, 13),
    (r#"^cluster(\..+\.(.+))\.total_match_count$"#, 34),
    (
        r#"^http\.(((?:[_.[:digit:]\w]*|[_\[\]aAbBcCdDeEfF[:digit:]\w\:]*));\.)"#,
        23,
    ),
    (
        r#"^listener\.(((?:[_.[:digit:]]*|[_\[\]aAbBcCdDeEfF[:digit:]]*))\.)"#,
        21,
    ),
    (r#"^localhost\.localdomain(?::\d+)?$"#, 9),
    (
        r#"^mongo\.(.+?)\.(collection|cmd|cx_|op_|delays_|decoding_)(.*?)$"#,
        47,
    ),
    (r#"^server(\.(.+))\.watchdog"#, 21),
    (r#"^tcp\.((.*?)\.)\w+?$"#, 15),
    (r#"_rq(_(\dxx))$"#, 15),
    (r#"_rq(_(\d{3}))$"#, 15),
    (r#"circuit_breakers\.((.+?)\.).+"#, 32),
    (r#"rbac(\.(allowed|denied))"#, 26),
    (r#"https?://(www.)?envoyproxy.io/docs/envoy.*"#, 48),
    (r#"^/regex/([^/]+)/(.*)$"#, 14),
    (r#"(response_code=\.=(.+?);\.;)|_rq(_(\.d{3}))$"#, 43),
    (r#"(reporter=\.=(.*?);\.;)"#, 24),
    (r#"(source_workload=\.=(.*?);\.;)"#, 31),
    (
        r#"^(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,}$"#,
        256,
    ),
    (r#"[a-zA-Z]+|[0-9]+"#, 12),
    (r#"(?i)(foo|FOO)bar"#, 12),
    (r#"(?i)a|b"#, 5),
    (r#"ab|ac|b"#, 7),
    (r#"a(b|c)d|a(b|c)e"#, 13),
    (r#"(?:x|y)*z"#, 6),
    (r#"(?:x*)*"#, 5),
    (r#"(?:x?)+"#, 5),
    (r#"(?:a+)?"#, 5),
    (r#"(?:)"#, 4),
    (r#"(?:|a)*"#, 10),
    (r#"^+"#, 6),
    (r#"$*"#, 9),
    (r#"\b*"#, 9),
    (r#"(a*)+"#, 8),
    (r#"(a*)*"#, 11),
    (r#"(a|b)*?c"#, 8),
    (r#"[^/]+/[^/]+"#, 11),
    (r#"a{2}b|a{2}c"#, 7),
    (r#"[ab]x|[ab]y|[ab]z"#, 6),
    (r#".x|.y"#, 7),
    (r#"(?s:.x|.y)"#, 6),
    (r#"(?s).|a"#, 5),
    (r#"a|(?s)."#, 5),
    (r#"(?s)a|.|b"#, 5),
    (r#"^a|^b"#, 3),
    (r#"$a|$b"#, 6),
    (r#"\ba|\bb"#, 6),
    (r#"(?:^)*"#, 9),
    (r#"\b+"#, 6),
    (r#"(?:$|a){2}"#, 8),
    (r#"(?:^$){3}"#, 2),
    (r#"(?:\b\B){0,2}"#, 7),
    (r#"www\.example\.com|api\.example\.com|example\.com"#, 45),
    (r#"foo\.bar|foo\.baz|foo|fo"#, 14),
    (r#"(?i)foo|(?i)FOX"#, 8),
    (r#"a(?i)b|ab"#, 8),
    (r#"x(?:a|b)(?:a|b)"#, 7),
    (r#"(a|b|c|d|e|f|g|h)"#, 7),
    (r#"[a-c]|[b-d]|x"#, 6),
    (r#"a*|b*"#, 10),
    (r#"(?:a|ab)(?:c|bcd)(?:d*)"#, 12),
    (r#"\x{e9}"#, 5),
    (r#"[\x{e0}-\x{ff}]"#, 5),
    (r#"(?i)[\x{e0}-\x{ff}]"#, 5),
    (r#"(?i)[k-m]"#, 5),
    (r#"(?i)[^k]"#, 7),
    (r#"[^\x00-\xff]"#, 1),
    (r#"[\d\D]"#, 5),
    (r#"[\w\W]x"#, 6),
    (r#"a{0}b{0}"#, 4),
    (r#"(?:a{0})*"#, 4),
    (r#"(?:a?){5}"#, 14),
    (r#"(?:a*?){3}"#, 9),
    (r#"a{5,10}?"#, 19),
    (r#"(?:ab|cd){2,4}"#, 22),
    (r#"\Aa|\Ab"#, 3),
    (r#"\z"#, 4),
    (r#"(?m)a$|b$"#, 8),
    (r#"(?U)a+?b*"#, 8),
    (r#"[[:upper:]][[:lower:]]+"#, 7),
    (r#"[[:punct:]]"#, 8),
    (r#"[[:space:]]+"#, 7),
    (r#"[[:word:]]"#, 7),
    (r#"\pN\pL"#, 15),
    (r#"[\p{Latin}]"#, 10),
    (r#"\p{Han}"#, 1),
    (r#"(?i)\p{Lu}"#, 7),
    // Non-ASCII text: Envoy measures its UTF-8 bytes one by one.
    (r#"[à-ÿ]"#, 5),
    (r#"(?i)[à-ÿ]"#, 5),
    (r#"(?i)ÀB"#, 7),
    (r#"[^é]+"#, 8),
    (r#"é|è|ê"#, 6),
    (r#"café|cafè"#, 9),
    (r#"日本|日向"#, 13),
    (r#"(?i)straße"#, 11),
    (r#"[αβγ]"#, 6),
    (r#"€+"#, 8),
    (r#"\x{e9}+|é"#, 10),
    (r#"(?s)[^a]"#, 6),
    (r#"(?i)[\x{c0}-\x{de}]"#, 5),
    (r#"(?i)µ"#, 6),
    (r#"(?i)ÿ"#, 6),
];

#[test]
fn program_sizes_are_envoys() {
    let mut wrong = Vec::new();
    for &(regex, envoy) in ENVOY_SIZES {
        let ours = program_size(regex);
        if ours != Ok(envoy) {
            wrong.push(format!("{regex}: Envoy {envoy}, courier {ours:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Escapes above 0xFF are what Envoy's RE2 refuses ("invalid escape sequence").
#[test]
fn escapes_above_latin1_are_refused() {
    assert_eq!(program_size(r"\x{100}"), Err(SizeError::InvalidEscape));
    assert_eq!(
        program_size(r"[\x{80}-\x{10FFFF}]"),
        Err(SizeError::InvalidEscape)
    );
    assert_eq!(program_size(r"\x{FF}"), Ok(5));
}

/// Nested counts multiplying past 1000, and stacked repetition operators, are
/// refused by RE2 (and Envoy).
#[test]
fn bad_repetitions_are_refused() {
    for stacked in [r"\d+?{2,}", r"\.?+?", "a**", "é{2}+", r"\w*?{1,3}"] {
        assert_eq!(
            program_size(stacked),
            Err(SizeError::BadRepetition),
            "{stacked}"
        );
    }
    assert_eq!(program_size("(?:a*)*"), Ok(5));
    assert_eq!(
        program_size("((a{10}){10}){11}"),
        Err(SizeError::BadRepetition)
    );
    assert_eq!(program_size("(a{2}){501}"), Err(SizeError::BadRepetition));
    assert!(matches!(
        check("(a{2}){501}", Limits::default(), None),
        Verdict::Refuse(_)
    ));
}

/// RE2's default UTF-8 reading: `.` is a byte-sequence trie, `é` one character.
#[test]
fn utf8_programs_follow_rune_ranges() {
    let utf8 = |r| program_size_with(r, Encoding::Utf8).unwrap();
    // Fail, the .*? loop (one list), the class's lists, the match.
    assert_eq!(utf8("a"), 5);
    assert_eq!(utf8("é"), 6);
    assert!(utf8(".") > program_size(".").unwrap());
    assert!(utf8(r"\pL") > 100);
}

#[test]
fn default_error_level_refuses_a_200() {
    let Verdict::Refuse(message) = check("a{200}", Limits::default(), None) else {
        panic!("a{{200}} accepted")
    };
    assert_eq!(
        message,
        "regex 'a{200}' RE2 program size of 204 > max program size of 100 set for the error \
         level threshold. Increase configured max program size if necessary."
    );
    assert_eq!(check("a{96}", Limits::default(), None), Verdict::Fine);
    assert!(matches!(
        check("a{97}", Limits::default(), None),
        Verdict::Refuse(_)
    ));
}

#[test]
fn warn_level_warns_and_the_deprecated_field_replaces_the_runtime() {
    let limits = Limits {
        error_level: 1000,
        warn_level: 10,
    };
    let Verdict::Warn(message) = check("a{20}", limits, None) else {
        panic!("no warning")
    };
    assert!(message.ends_with(
        "RE2 program size of 24 > max program size of 10 set for the warn level threshold. \
         Increase configured max program size if necessary."
    ));
    // `google_re2.max_program_size` set: only it counts, with its own message.
    assert_eq!(check("a{200}", Limits::default(), Some(300)), Verdict::Fine);
    assert_eq!(
        check("a{20}", limits, Some(5)),
        Verdict::Refuse(
            "regex 'a{20}' RE2 program size of 24 > max program size of 5. Increase configured \
             max program size if necessary."
                .into()
        )
    );
}

/// An xDS resource is checked against the limits in force in the process when
/// it is loaded (the proxy sets them from the runtime, RTDS and
/// `/runtime_modify` included), not against those of the bootstrap's load.
#[test]
fn xds_resources_are_checked_against_the_process_limits() {
    use envoy_types::pb::envoy::config::route::v3 as route;
    use envoy_types::pb::envoy::r#type::matcher::v3::RegexMatcher;
    use prost::Name;
    let rc = route::RouteConfiguration {
        name: "r".into(),
        virtual_hosts: vec![route::VirtualHost {
            name: "v".into(),
            domains: vec!["*".into()],
            routes: vec![route::Route {
                r#match: Some(route::RouteMatch {
                    path_specifier: Some(route::route_match::PathSpecifier::SafeRegex(
                        RegexMatcher {
                            regex: "a{200}".into(),
                            ..Default::default()
                        },
                    )),
                    ..Default::default()
                }),
                action: Some(route::route::Action::DirectResponse(
                    route::DirectResponseAction {
                        status: 200,
                        ..Default::default()
                    },
                )),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let any = envoy_types::pb::google::protobuf::Any {
        type_url: route::RouteConfiguration::type_url(),
        value: prost::Message::encode_to_vec(&rc),
    };
    let load = || {
        let mut ctx = crate::Ctx::new();
        let r = crate::resource::translate(&any, &mut ctx);
        ctx.finish(r)
    };
    // Only raised here, so tests running beside this one never see a lower limit.
    super::set_process_limits(Limits {
        error_level: 32768,
        warn_level: 1000,
    });
    let raised = load();
    super::set_process_limits(Limits::default());
    assert!(raised.is_ok(), "{raised:?}");
    let err = load().unwrap_err().to_string();
    assert!(
        err.contains(
            "safe_regex.regex: regex 'a{200}' RE2 program size of 204 > max program size of 100"
        ),
        "{err}"
    );
}
