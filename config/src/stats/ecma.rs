//! Configured tag regexes: Envoy compiles `stats_tags[].regex` with
//! `std::regex` (ECMAScript grammar), which has lookahead but none of
//! lookbehind, named groups, inline flags, atomic groups or `\A`-style
//! anchors. `fancy-regex` has all of those, so the constructs ECMAScript lacks
//! are refused first, as Envoy refuses them, and the rest compiled by it.

/// Group openers ECMAScript has after `(?`.
const ECMA_GROUPS: &[char] = &[':', '=', '!'];

/// Escapes `fancy-regex` gives a meaning ECMAScript does not have.
const NON_ECMA_ESCAPES: &[char] = &[
    'A', 'z', 'Z', 'K', 'G', 'p', 'P', 'h', 'H', 'R', 'X', 'Q', 'E',
];

/// Compiles an ECMAScript tag regex; the error says why it is not one.
pub(crate) fn compile(pattern: &str) -> Result<fancy_regex::Regex, String> {
    check(pattern)?;
    fancy_regex::Regex::new(pattern).map_err(|e| e.to_string())
}

fn check(pattern: &str) -> Result<(), String> {
    let mut chars = pattern.chars().peekable();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(e) = chars.next()
                    && !in_class
                    && NON_ECMA_ESCAPES.contains(&e)
                {
                    return Err(format!("'\\{e}' is not an ECMAScript escape"));
                }
            }
            '[' if !in_class => in_class = true,
            // A POSIX class (`[:digit:]`) inside a bracket: its `]` does not close it.
            '[' if chars.peek() == Some(&':') => {
                let mut prev = ' ';
                for n in chars.by_ref() {
                    if prev == ':' && n == ']' {
                        break;
                    }
                    prev = n;
                }
            }
            ']' if in_class => in_class = false,
            '(' if !in_class && chars.peek() == Some(&'?') => {
                chars.next();
                match chars.peek() {
                    Some(g) if ECMA_GROUPS.contains(g) => {}
                    _ => {
                        return Err(
                            "One of *?+{ was not preceded by a valid regular expression."
                                .to_string(),
                        );
                    }
                }
            }
            '*' | '+' | '?' | '}' if !in_class && chars.peek() == Some(&'+') => {
                return Err("possessive quantifiers are not ECMAScript".to_string());
            }
            _ => {}
        }
    }
    Ok(())
}
