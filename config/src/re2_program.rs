//! RE2's program size, measured the way Envoy sees it.
//!
//! Envoy refuses a regex whose `RE2::ProgramSize()` is above the runtime key
//! `re2.max_program_size.error_level` (100 when unset). courier matches with the
//! `regex` crate, so to refuse exactly the regexes Envoy refuses it re-creates the
//! number RE2 would compute: the instruction count of the forward `Prog` after
//! RE2's `Flatten()`. That count depends on every step RE2 takes between the
//! pattern and the flattened program, so each step is re-created here in order:
//!
//! 1. **Parse** (RE2's `parse.cc`): the pattern's syntax tree (from `regex-syntax`)
//!    drives a stack machine shaped like RE2's `ParseState`, so literals merge
//!    into strings lazily, one-rune classes become literals, `[Aa]` becomes a
//!    case-folded `a`, `**` squashes, and alternations are factored (common
//!    literal prefixes, common leading pieces, runs of literals and classes
//!    merged into one class) exactly when RE2 does.
//! 2. **`RE2::Init`**: a pattern of the form `^literal…` is compiled without the
//!    anchor and the literal (RE2 matches that prefix by itself).
//! 3. **Simplify** (`simplify.cc`): adjacent repeats of the same atom coalesce,
//!    `x{n,m}` expands into copies and nested `?`, empty and full classes become
//!    no-match and any-char.
//! 4. **Compile** (`compile.cc`): the same instruction allocation, patch lists,
//!    UTF-8 range splitting and suffix sharing, leading `^` / trailing `$`
//!    anchors removed, the unanchored `.*?` prefix added.
//! 5. **Optimize and Flatten** (`prog.cc`): Nops skipped, `.*` before a match
//!    marked, then the program cut into lists at its roots and counted.
//!
//! Envoy 1.40's RE2 measures programs as RE2's Latin-1 mode builds them (each
//! byte of the pattern one character, classes clipped to 0xFF, case folding
//! for ASCII letters only), which is what [`program_size`] computes; the
//! UTF-8 reading of RE2's default options is kept beside it
//! ([`program_size_with`]). Every size in the tests was read from
//! `envoy --mode validate`, and `tests/re2_program_size_differential.rs`
//! compares courier with Envoy directly.

use regex_syntax::ast::{self, Ast};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a program size could not be computed (the pattern is not one RE2 and
/// `regex-syntax` both parse the same way; courier's regex compile reports it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// An escape names a character above RE2's largest (0xFF in Latin-1):
    /// RE2 refuses the regex.
    #[error("invalid escape sequence")]
    InvalidEscape,
    /// A repetition operator RE2 refuses ("bad repetition operator"): one
    /// stacked on another (`a**`, `a+{2}`; Perl forbids them too), or nested
    /// counts multiplying past 1000 copies.
    #[error("bad repetition operator")]
    BadRepetition,
    /// Syntax courier's emulation does not follow (its regex compile reports
    /// what is wrong, if anything).
    #[error("cannot measure the RE2 program size of this regex: {0}")]
    Unmeasured(String),
}

/// Envoy's RE2 program-size thresholds, from the runtime keys
/// `re2.max_program_size.error_level` and `re2.max_program_size.warn_level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A bigger program is refused (Envoy's default: 100).
    pub error_level: u32,
    /// A bigger program is logged at warn level (default: never).
    pub warn_level: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            error_level: 100,
            warn_level: u32::MAX,
        }
    }
}

/// The limits in force in this process for configs loaded from now on (xDS
/// resources): the proxy sets them whenever the runtime changes, and as in
/// Envoy a change applies at the next load, not to regexes already compiled.
/// Both halves in one word so a reader never sees half an update.
static PROCESS_LIMITS: AtomicU64 = AtomicU64::new((100 << 32) | u32::MAX as u64);

/// Sets the limits that configs loaded from now on are checked against.
pub fn set_process_limits(limits: Limits) {
    let word = (u64::from(limits.error_level) << 32) | u64::from(limits.warn_level);
    PROCESS_LIMITS.store(word, Ordering::Relaxed);
}

/// The limits set by [`set_process_limits`] (Envoy's defaults until then).
pub fn process_limits() -> Limits {
    let word = PROCESS_LIMITS.load(Ordering::Relaxed);
    Limits {
        error_level: (word >> 32) as u32,
        warn_level: word as u32,
    }
}

/// What Envoy says of a regex's program size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Within the limits.
    Fine,
    /// Over `warn_level`: Envoy logs this warning and loads the regex.
    Warn(String),
    /// Over a limit: Envoy refuses the regex with this message.
    Refuse(String),
}

/// Checks `pattern` as Envoy's `CompiledGoogleReMatcher` does. `deprecated_max`
/// is `google_re2.max_program_size` when set: then only it applies (no runtime
/// thresholds, no warning), as in Envoy.
pub fn check(pattern: &str, limits: Limits, deprecated_max: Option<u32>) -> Verdict {
    let size = match program_size(pattern) {
        Ok(size) => size,
        Err(SizeError::InvalidEscape) => {
            return Verdict::Refuse(format!("invalid escape sequence in '{pattern}'"));
        }
        Err(SizeError::BadRepetition) => {
            return Verdict::Refuse(format!("bad repetition operator in '{pattern}'"));
        }
        // Syntax the emulation does not follow is syntax courier's own regex
        // compile refuses; that error is the one to report.
        Err(SizeError::Unmeasured(_)) => return Verdict::Fine,
    };
    if let Some(max) = deprecated_max {
        if size > max {
            return Verdict::Refuse(format!(
                "regex '{pattern}' RE2 program size of {size} > max program size of {max}. \
                 Increase configured max program size if necessary."
            ));
        }
        return Verdict::Fine;
    }
    if size > limits.error_level {
        return Verdict::Refuse(format!(
            "regex '{pattern}' RE2 program size of {size} > max program size of {} set for the \
             error level threshold. Increase configured max program size if necessary.",
            limits.error_level
        ));
    }
    if size > limits.warn_level {
        return Verdict::Warn(format!(
            "regex '{pattern}' RE2 program size of {size} > max program size of {} set for the \
             warn level threshold. Increase configured max program size if necessary.",
            limits.warn_level
        ));
    }
    Verdict::Fine
}

/// How RE2 reads the pattern and the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Every byte is one character (RE2's `Options::Latin1`). Envoy 1.40's RE2
    /// measures programs this way: `é` counts as its two UTF-8 bytes, `.` is
    /// one byte range, `\x{100}` is an invalid escape and `\p{Greek}` is empty
    /// (calibrated with `envoy --mode validate`, see the module's tests).
    Latin1,
    /// UTF-8 (RE2's default options): characters compile to byte sequences.
    Utf8,
}

/// RE2's `ProgramSize()` of `pattern` as Envoy 1.40 computes it for every
/// `safe_regex` (see [`Encoding::Latin1`]).
pub fn program_size(pattern: &str) -> Result<u32, SizeError> {
    program_size_with(pattern, Encoding::Latin1)
}

/// RE2's `ProgramSize()` of `pattern` read in `encoding`.
pub fn program_size_with(pattern: &str, encoding: Encoding) -> Result<u32, SizeError> {
    let text = match encoding {
        Encoding::Utf8 => pattern.to_string(),
        // RE2 turns a Latin-1 pattern into UTF-8 first: each byte of the UTF-8
        // text courier holds becomes one character.
        Encoding::Latin1 => pattern
            .bytes()
            .map(|b| char::from_u32(u32::from(b)).unwrap_or('\0'))
            .collect(),
    };
    let ast = ast::parse::ParserBuilder::new()
        .build()
        .parse(&text)
        .map_err(|e| SizeError::Unmeasured(e.kind().to_string()))?;
    let mut p = Parser::new(&text, encoding);
    p.walk(&ast)?;
    let re = p.finish()?;
    let re = required_prefix_suffix(re);
    Ok(compile(re, encoding))
}

// ---------------------------------------------------------------------------
// RE2's Regexp tree.

/// RE2 parse flags that change what the tree or the program looks like.
const FOLD_CASE: u16 = 1;
const DOT_NL: u16 = 1 << 1;
const ONE_LINE: u16 = 1 << 2;
const NON_GREEDY: u16 = 1 << 3;
const WAS_DOLLAR: u16 = 1 << 4;
const LATIN1: u16 = 1 << 6;
/// RE2's `LikePerl` flags that courier never changes (class-NL, Perl classes,
/// `\b`, Perl extensions, Unicode groups) as one bit: they only take part in
/// whole-flag comparisons.
const PERL: u16 = 1 << 5;
/// `RE2::Options` defaults: `LikePerl` (which includes `OneLine`).
const DEFAULT_FLAGS: u16 = PERL | ONE_LINE;

const RUNE_MAX: u32 = 0x10FFFF;

#[derive(Debug, Clone)]
enum Op {
    NoMatch,
    EmptyMatch,
    Literal(u32),
    LiteralString(Vec<u32>),
    Concat(Vec<Re>),
    Alternate(Vec<Re>),
    Star(Box<Re>),
    Plus(Box<Re>),
    Quest(Box<Re>),
    Repeat(Box<Re>, i32, i32),
    Capture(Box<Re>, u32),
    AnyChar,
    BeginLine,
    EndLine,
    WordBoundary,
    NoWordBoundary,
    BeginText,
    EndText,
    CharClass(Vec<(u32, u32)>),
    // Parse-stack markers.
    LeftParen(Option<u32>),
    VerticalBar,
}

#[derive(Debug, Clone)]
struct Re {
    op: Op,
    flags: u16,
}

impl Re {
    fn new(op: Op, flags: u16) -> Self {
        Self { op, flags }
    }

    fn is_marker(&self) -> bool {
        matches!(self.op, Op::LeftParen(_) | Op::VerticalBar)
    }

    fn subs(&self) -> &[Re] {
        match &self.op {
            Op::Concat(s) | Op::Alternate(s) => s,
            Op::Star(s) | Op::Plus(s) | Op::Quest(s) | Op::Repeat(s, _, _) | Op::Capture(s, _) => {
                std::slice::from_ref(s)
            }
            _ => &[],
        }
    }
}

/// RE2's `Regexp::Equal`: structure and the flags each op cares about.
fn equal(a: &Re, b: &Re) -> bool {
    let top = match (&a.op, &b.op) {
        (Op::NoMatch, Op::NoMatch)
        | (Op::EmptyMatch, Op::EmptyMatch)
        | (Op::AnyChar, Op::AnyChar)
        | (Op::BeginLine, Op::BeginLine)
        | (Op::EndLine, Op::EndLine)
        | (Op::WordBoundary, Op::WordBoundary)
        | (Op::NoWordBoundary, Op::NoWordBoundary)
        | (Op::BeginText, Op::BeginText) => true,
        (Op::EndText, Op::EndText) => (a.flags ^ b.flags) & WAS_DOLLAR == 0,
        (Op::Literal(x), Op::Literal(y)) => x == y && (a.flags ^ b.flags) & FOLD_CASE == 0,
        (Op::LiteralString(x), Op::LiteralString(y)) => {
            x == y && (a.flags ^ b.flags) & FOLD_CASE == 0
        }
        (Op::Concat(x), Op::Concat(y)) | (Op::Alternate(x), Op::Alternate(y)) => x.len() == y.len(),
        (Op::Star(_), Op::Star(_)) | (Op::Plus(_), Op::Plus(_)) | (Op::Quest(_), Op::Quest(_)) => {
            (a.flags ^ b.flags) & NON_GREEDY == 0
        }
        (Op::Repeat(_, n1, m1), Op::Repeat(_, n2, m2)) => {
            (a.flags ^ b.flags) & NON_GREEDY == 0 && n1 == n2 && m1 == m2
        }
        (Op::Capture(_, c1), Op::Capture(_, c2)) => c1 == c2,
        (Op::CharClass(x), Op::CharClass(y)) => x == y,
        _ => false,
    };
    top && a.subs().iter().zip(b.subs()).all(|(x, y)| equal(x, y))
}

fn literal_string(runes: &[u32], flags: u16) -> Re {
    match runes {
        [] => Re::new(Op::EmptyMatch, flags),
        [r] => Re::new(Op::Literal(*r), flags),
        _ => Re::new(Op::LiteralString(runes.to_vec()), flags),
    }
}

/// RE2's `Regexp::Star` / `Plus` / `Quest`, which squash `**`, `*+`, `+?` ...
fn star_plus_quest(kind: u8, sub: Re, flags: u16) -> Re {
    let same_kind = matches!(
        (kind, &sub.op),
        (b'*', Op::Star(_)) | (b'+', Op::Plus(_)) | (b'?', Op::Quest(_))
    );
    if same_kind && flags == sub.flags {
        return sub;
    }
    if matches!(sub.op, Op::Star(_) | Op::Plus(_) | Op::Quest(_)) && flags == sub.flags {
        if matches!(sub.op, Op::Star(_)) {
            return sub;
        }
        let inner = match sub.op {
            Op::Plus(s) | Op::Quest(s) => s,
            _ => unreachable!("checked above"),
        };
        return Re::new(Op::Star(inner), flags);
    }
    let b = Box::new(sub);
    let op = match kind {
        b'*' => Op::Star(b),
        b'+' => Op::Plus(b),
        _ => Op::Quest(b),
    };
    Re::new(op, flags)
}

/// RE2's `Regexp::Concat` (no factoring): one sub is itself, none is empty.
fn concat(mut subs: Vec<Re>, flags: u16) -> Re {
    match subs.len() {
        0 => Re::new(Op::EmptyMatch, flags),
        1 => subs.pop().unwrap_or_else(|| Re::new(Op::EmptyMatch, flags)),
        _ => Re::new(Op::Concat(subs), flags),
    }
}

/// RE2's `Regexp::AlternateNoFactor`.
fn alternate_no_factor(mut subs: Vec<Re>, flags: u16) -> Re {
    match subs.len() {
        0 => Re::new(Op::NoMatch, flags),
        1 => subs.pop().unwrap_or_else(|| Re::new(Op::NoMatch, flags)),
        _ => Re::new(Op::Alternate(subs), flags),
    }
}

// ---------------------------------------------------------------------------
// Character classes: sorted, merged, inclusive rune ranges.

fn normalize(mut ranges: Vec<(u32, u32)>) -> Vec<(u32, u32)> {
    ranges.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
    for (lo, hi) in ranges {
        match out.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

fn negate(ranges: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let mut next = 0u32;
    for &(lo, hi) in ranges {
        if lo > next {
            out.push((next, lo - 1));
        }
        next = hi + 1;
    }
    if next <= RUNE_MAX {
        out.push((next, RUNE_MAX));
    }
    out
}

/// Adds every case folding of the class: RE2's `AddFoldedRange` (simple Unicode
/// folding) or, under `LATIN1`, `AddFoldedRangeLatin1` (ASCII letters only).
fn fold(ranges: &[(u32, u32)], flags: u16) -> Vec<(u32, u32)> {
    use regex_syntax::hir::{ClassUnicode, ClassUnicodeRange};
    if flags & LATIN1 != 0 {
        let mut all = ranges.to_vec();
        for &(lo, hi) in ranges {
            for (a, z, delta) in [(0x41u32, 0x5Au32, 32i64), (0x61, 0x7A, -32)] {
                let (l, h) = (lo.max(a), hi.min(z));
                if l <= h {
                    let shift = |c: u32| (i64::from(c) + delta) as u32;
                    all.push((shift(l), shift(h)));
                }
            }
        }
        return normalize(all);
    }
    let mut class = ClassUnicode::empty();
    for &(lo, hi) in ranges {
        // Surrogates are not chars; they have no case either.
        for (a, b) in [(lo, hi.min(0xD7FF)), (lo.max(0xE000), hi)] {
            if let (Some(a), Some(b)) = (char::from_u32(a), char::from_u32(b))
                && a <= b
            {
                class.push(ClassUnicodeRange::new(a, b));
            }
        }
    }
    class.case_fold_simple();
    let mut all: Vec<(u32, u32)> = ranges.to_vec();
    all.extend(class.iter().map(|r| (r.start() as u32, r.end() as u32)));
    normalize(all)
}

fn rune_count(ranges: &[(u32, u32)]) -> u64 {
    ranges.iter().map(|&(lo, hi)| u64::from(hi - lo) + 1).sum()
}

/// The ranges of a Unicode or POSIX class, as `regex-syntax` has them.
fn translated_class(text: &str) -> Result<Vec<(u32, u32)>, SizeError> {
    use regex_syntax::hir::{Class, HirKind};
    let hir = regex_syntax::Parser::new()
        .parse(text)
        .map_err(|e| SizeError::Unmeasured(e.to_string()))?;
    match hir.kind() {
        HirKind::Class(Class::Unicode(c)) => Ok(c
            .iter()
            .map(|r| (r.start() as u32, r.end() as u32))
            .collect()),
        HirKind::Literal(lit) => {
            let s =
                std::str::from_utf8(&lit.0).map_err(|e| SizeError::Unmeasured(e.to_string()))?;
            Ok(s.chars().map(|c| (c as u32, c as u32)).collect())
        }
        _ => Err(SizeError::Unmeasured(format!("unexpected class {text}"))),
    }
}

/// RE2's Perl classes are ASCII only.
fn perl_class(kind: &ast::ClassPerlKind) -> Vec<(u32, u32)> {
    match kind {
        ast::ClassPerlKind::Digit => vec![(0x30, 0x39)],
        ast::ClassPerlKind::Space => vec![(0x09, 0x0A), (0x0C, 0x0D), (0x20, 0x20)],
        ast::ClassPerlKind::Word => vec![(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    }
}

// ---------------------------------------------------------------------------
// Parsing: RE2's ParseState, driven by the syntax tree in pattern order.

struct Parser<'a> {
    pattern: &'a str,
    stack: Vec<Re>,
    flags: u16,
    ncap: u32,
}

impl<'a> Parser<'a> {
    fn new(pattern: &'a str, encoding: Encoding) -> Self {
        let latin1 = if encoding == Encoding::Latin1 {
            LATIN1
        } else {
            0
        };
        Self {
            pattern,
            stack: Vec::new(),
            flags: DEFAULT_FLAGS | latin1,
            ncap: 0,
        }
    }

    fn rune_max(&self) -> u32 {
        if self.flags & LATIN1 != 0 {
            0xFF
        } else {
            RUNE_MAX
        }
    }

    fn walk(&mut self, ast: &Ast) -> Result<(), SizeError> {
        match ast {
            Ast::Empty(_) => {}
            Ast::Flags(f) => self.set_flags(&f.flags),
            Ast::Literal(l) => {
                self.check_rune(l.c)?;
                self.push_literal(l.c as u32)
            }
            Ast::Dot(_) => self.push_dot(),
            Ast::Assertion(a) => {
                let op = match a.kind {
                    ast::AssertionKind::StartLine if self.flags & ONE_LINE != 0 => Op::BeginText,
                    ast::AssertionKind::StartLine => Op::BeginLine,
                    ast::AssertionKind::EndLine if self.flags & ONE_LINE != 0 => {
                        let f = self.flags | WAS_DOLLAR;
                        self.push_regexp(Re::new(Op::EndText, f));
                        return Ok(());
                    }
                    ast::AssertionKind::EndLine => Op::EndLine,
                    ast::AssertionKind::StartText => Op::BeginText,
                    ast::AssertionKind::EndText => Op::EndText,
                    ast::AssertionKind::WordBoundary => Op::WordBoundary,
                    ast::AssertionKind::NotWordBoundary => Op::NoWordBoundary,
                    _ => return Err(SizeError::Unmeasured("assertion RE2 does not have".into())),
                };
                self.push_regexp(Re::new(op, self.flags));
            }
            Ast::ClassUnicode(c) => {
                let mut ranges = Vec::new();
                self.class_item(&ast::ClassSetItem::Unicode((**c).clone()), &mut ranges)?;
                self.push_class(ranges);
            }
            Ast::ClassPerl(c) => {
                let mut ranges = Vec::new();
                self.class_item(&ast::ClassSetItem::Perl((**c).clone()), &mut ranges)?;
                self.push_class(ranges);
            }
            Ast::ClassBracketed(c) => {
                let ranges = self.bracketed(c)?;
                self.push_class(ranges);
            }
            Ast::Repetition(r) => {
                if matches!(*r.ast, Ast::Repetition(_)) {
                    return Err(SizeError::BadRepetition);
                }
                self.walk(&r.ast)?;
                let nongreedy = !r.greedy;
                match &r.op.kind {
                    ast::RepetitionKind::ZeroOrOne => self.push_repeat_op(b'?', nongreedy),
                    ast::RepetitionKind::ZeroOrMore => self.push_repeat_op(b'*', nongreedy),
                    ast::RepetitionKind::OneOrMore => self.push_repeat_op(b'+', nongreedy),
                    ast::RepetitionKind::Range(range) => {
                        let (min, max) = match *range {
                            ast::RepetitionRange::Exactly(n) => (n, Some(n)),
                            ast::RepetitionRange::AtLeast(n) => (n, None),
                            ast::RepetitionRange::Bounded(n, m) => (n, Some(m)),
                        };
                        let to_i32 = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
                        self.push_repetition(to_i32(min), max.map_or(-1, to_i32), nongreedy)?;
                    }
                }
            }
            Ast::Group(g) => {
                let saved = self.flags;
                match &g.kind {
                    ast::GroupKind::CaptureIndex(_) | ast::GroupKind::CaptureName { .. } => {
                        self.ncap += 1;
                        let marker = Re::new(Op::LeftParen(Some(self.ncap)), self.flags);
                        self.push_regexp(marker);
                    }
                    ast::GroupKind::NonCapturing(flags) => {
                        self.push_regexp(Re::new(Op::LeftParen(None), saved));
                        self.set_flags(flags);
                    }
                }
                self.walk(&g.ast)?;
                self.do_right_paren()?;
            }
            Ast::Alternation(a) => {
                for (i, sub) in a.asts.iter().enumerate() {
                    if i > 0 {
                        self.do_vertical_bar();
                    }
                    self.walk(sub)?;
                }
            }
            Ast::Concat(c) => {
                for sub in &c.asts {
                    self.walk(sub)?;
                }
            }
        }
        Ok(())
    }

    /// RE2 refuses an escape above the largest character (0xFF in Latin-1).
    fn check_rune(&self, c: char) -> Result<(), SizeError> {
        if c as u32 > self.rune_max() {
            return Err(SizeError::InvalidEscape);
        }
        Ok(())
    }

    fn set_flags(&mut self, flags: &ast::Flags) {
        let mut negated = false;
        for item in &flags.items {
            let bit = match &item.kind {
                ast::FlagsItemKind::Negation => {
                    negated = true;
                    continue;
                }
                ast::FlagsItemKind::Flag(ast::Flag::CaseInsensitive) => FOLD_CASE,
                ast::FlagsItemKind::Flag(ast::Flag::DotMatchesNewLine) => DOT_NL,
                ast::FlagsItemKind::Flag(ast::Flag::SwapGreed) => NON_GREEDY,
                // RE2's `m` is "not one line".
                ast::FlagsItemKind::Flag(ast::Flag::MultiLine) => {
                    if negated {
                        self.flags |= ONE_LINE;
                    } else {
                        self.flags &= !ONE_LINE;
                    }
                    continue;
                }
                ast::FlagsItemKind::Flag(_) => continue,
            };
            if negated {
                self.flags &= !bit;
            } else {
                self.flags |= bit;
            }
        }
    }

    /// A bracketed class's runes: each item folded (under `(?i)`) as RE2 adds it,
    /// then the whole negated.
    fn bracketed(&self, c: &ast::ClassBracketed) -> Result<Vec<(u32, u32)>, SizeError> {
        let mut ranges = Vec::new();
        match &c.kind {
            ast::ClassSet::Item(item) => self.class_item(item, &mut ranges)?,
            ast::ClassSet::BinaryOp(_) => {
                return Err(SizeError::Unmeasured(
                    "class set operations are not RE2 syntax".into(),
                ));
            }
        }
        let ranges = normalize(ranges);
        Ok(if c.negated { negate(&ranges) } else { ranges })
    }

    fn class_item(
        &self,
        item: &ast::ClassSetItem,
        out: &mut Vec<(u32, u32)>,
    ) -> Result<(), SizeError> {
        let flags = self.flags;
        let fold_case = flags & FOLD_CASE != 0;
        let add = |r: Vec<(u32, u32)>, out: &mut Vec<(u32, u32)>| {
            out.extend(if fold_case {
                fold(&normalize(r), flags)
            } else {
                r
            });
        };
        match item {
            ast::ClassSetItem::Empty(_) => {}
            ast::ClassSetItem::Literal(l) => {
                self.check_rune(l.c)?;
                add(vec![(l.c as u32, l.c as u32)], out)
            }
            ast::ClassSetItem::Range(r) => {
                self.check_rune(r.start.c)?;
                self.check_rune(r.end.c)?;
                add(vec![(r.start.c as u32, r.end.c as u32)], out)
            }
            ast::ClassSetItem::Ascii(a) => {
                let text = &self.pattern[a.span.start.offset..a.span.end.offset];
                let r = translated_class(&format!("[{text}]"))?;
                // A negated POSIX class under (?i): RE2 folds the positive class
                // and negates the result.
                if a.negated && fold_case {
                    out.extend(negate(&fold(&negate(&normalize(r)), flags)));
                } else {
                    add(r, out);
                }
            }
            ast::ClassSetItem::Unicode(u) => {
                let text = &self.pattern[u.span.start.offset..u.span.end.offset];
                let r = normalize(translated_class(text)?);
                if u.negated && fold_case {
                    out.extend(negate(&fold(&negate(&r), flags)));
                } else {
                    add(r, out);
                }
            }
            ast::ClassSetItem::Perl(p) => {
                let mut r = perl_class(&p.kind);
                if fold_case {
                    r = fold(&r, flags);
                }
                out.extend(if p.negated { negate(&r) } else { r });
            }
            ast::ClassSetItem::Bracketed(b) => out.extend(self.bracketed(b)?),
            ast::ClassSetItem::Union(u) => {
                for item in &u.items {
                    self.class_item(item, out)?;
                }
            }
        }
        Ok(())
    }

    /// A class from a Unicode group, a Perl class or a bracket (already folded
    /// under `(?i)`, as RE2 folds while it adds ranges).
    fn push_class(&mut self, ranges: Vec<(u32, u32)>) {
        let ranges = normalize(ranges);
        self.push_regexp(Re::new(Op::CharClass(ranges), self.flags & !FOLD_CASE));
    }

    fn push_literal(&mut self, r: u32) {
        if self.flags & FOLD_CASE != 0 {
            let orbit = fold(&[(r, r)], self.flags);
            if rune_count(&orbit) > 1 {
                let cls = Re::new(Op::CharClass(orbit), self.flags & !FOLD_CASE);
                self.push_regexp(cls);
                return;
            }
        }
        if self.maybe_concat_string(Some(r), self.flags) {
            return;
        }
        self.push_regexp(Re::new(Op::Literal(r), self.flags));
    }

    fn push_dot(&mut self) {
        if self.flags & DOT_NL != 0 {
            self.push_regexp(Re::new(Op::AnyChar, self.flags));
            return;
        }
        let cls = vec![(0, 0x09), (0x0B, self.rune_max())];
        self.push_regexp(Re::new(Op::CharClass(cls), self.flags & !FOLD_CASE));
    }

    fn push_regexp(&mut self, mut re: Re) {
        self.maybe_concat_string(None, 0);
        if let Op::CharClass(ranges) = &mut re.op {
            // RE2's RemoveAbove(rune_max).
            let max = self.rune_max();
            ranges.retain(|&(lo, _)| lo <= max);
            if let Some(last) = ranges.last_mut() {
                last.1 = last.1.min(max);
            }
        }
        if let Op::CharClass(ranges) = &re.op {
            let n = rune_count(ranges);
            if n == 1 {
                re = Re::new(Op::Literal(ranges[0].0), self.flags);
            } else if n == 2 {
                let r = ranges[0].0;
                if (u32::from(b'A')..=u32::from(b'Z')).contains(&r)
                    && ranges.iter().any(|&(lo, hi)| lo <= r + 32 && r + 32 <= hi)
                {
                    re = Re::new(Op::Literal(r + 32), self.flags | FOLD_CASE);
                }
            }
        }
        self.stack.push(re);
    }

    /// RE2's `MaybeConcatString`: merges the two literals on top of the stack.
    fn maybe_concat_string(&mut self, r: Option<u32>, flags: u16) -> bool {
        let n = self.stack.len();
        if n < 2 {
            return false;
        }
        let is_lit = |re: &Re| matches!(re.op, Op::Literal(_) | Op::LiteralString(_));
        if !is_lit(&self.stack[n - 1]) || !is_lit(&self.stack[n - 2]) {
            return false;
        }
        if (self.stack[n - 1].flags ^ self.stack[n - 2].flags) & FOLD_CASE != 0 {
            return false;
        }
        let top = std::mem::replace(&mut self.stack[n - 1].op, Op::EmptyMatch);
        let below = &mut self.stack[n - 2];
        let mut runes = match std::mem::replace(&mut below.op, Op::EmptyMatch) {
            Op::Literal(c) => vec![c],
            Op::LiteralString(s) => s,
            _ => unreachable!("checked above"),
        };
        match top {
            Op::Literal(c) => runes.push(c),
            Op::LiteralString(s) => runes.extend(s),
            _ => unreachable!("checked above"),
        }
        below.op = Op::LiteralString(runes);
        if let Some(r) = r {
            self.stack[n - 1] = Re::new(Op::Literal(r), flags);
            return true;
        }
        self.stack.pop();
        false
    }

    fn push_repeat_op(&mut self, kind: u8, nongreedy: bool) {
        let mut fl = self.flags;
        if nongreedy {
            fl ^= NON_GREEDY;
        }
        let Some(top) = self.stack.pop() else { return };
        let same = matches!(
            (kind, &top.op),
            (b'*', Op::Star(_)) | (b'+', Op::Plus(_)) | (b'?', Op::Quest(_))
        );
        if same && fl == top.flags {
            self.stack.push(top);
            return;
        }
        if matches!(top.op, Op::Star(_) | Op::Plus(_) | Op::Quest(_)) && fl == top.flags {
            let inner = match top.op {
                Op::Star(s) | Op::Plus(s) | Op::Quest(s) => s,
                _ => unreachable!("checked above"),
            };
            self.stack.push(Re::new(Op::Star(inner), fl));
            return;
        }
        let b = Box::new(top);
        let op = match kind {
            b'*' => Op::Star(b),
            b'+' => Op::Plus(b),
            _ => Op::Quest(b),
        };
        self.stack.push(Re::new(op, fl));
    }

    fn push_repetition(&mut self, min: i32, max: i32, nongreedy: bool) -> Result<(), SizeError> {
        let mut fl = self.flags;
        if nongreedy {
            fl ^= NON_GREEDY;
        }
        let Some(top) = self.stack.pop() else {
            return Ok(());
        };
        let re = Re::new(Op::Repeat(Box::new(top), min, max), fl);
        // RE2's RepetitionWalker: nested counts may not multiply past 1000.
        if (min >= 2 || max >= 2) && repetition_budget(&re, 1000) == 0 {
            return Err(SizeError::BadRepetition);
        }
        self.stack.push(re);
        Ok(())
    }

    fn do_concatenation(&mut self) {
        if self.stack.last().is_none_or(Re::is_marker) {
            self.push_regexp(Re::new(Op::EmptyMatch, self.flags));
        }
        self.do_collapse(false);
    }

    fn do_alternation(&mut self) {
        self.do_vertical_bar();
        self.stack.pop();
        self.do_collapse(true);
    }

    fn do_vertical_bar(&mut self) {
        self.maybe_concat_string(None, 0);
        self.do_concatenation();
        let n = self.stack.len();
        if n >= 2 && matches!(self.stack[n - 2].op, Op::VerticalBar) {
            if n >= 3 {
                let any = |re: &Re| matches!(re.op, Op::AnyChar);
                let simple =
                    |re: &Re| matches!(re.op, Op::Literal(_) | Op::CharClass(_) | Op::AnyChar);
                let (r1, r3) = (&self.stack[n - 1], &self.stack[n - 3]);
                if any(r3) && simple(r1) {
                    // r1 adds nothing to an alternation that has `.` (with s).
                    self.stack.pop();
                    return;
                }
                if any(r1) && simple(r3) {
                    self.stack.swap(n - 1, n - 3);
                    self.stack.pop();
                    let bar = self.stack.pop();
                    let r1 = self.stack.pop();
                    if let (Some(bar), Some(r1)) = (bar, r1) {
                        self.stack.push(r1);
                        self.stack.push(bar);
                    }
                    return;
                }
            }
            self.stack.swap(n - 1, n - 2);
            return;
        }
        self.stack.push(Re::new(Op::VerticalBar, self.flags));
    }

    fn do_right_paren(&mut self) -> Result<(), SizeError> {
        self.do_alternation();
        let r1 = self.stack.pop();
        let r2 = self.stack.pop();
        let (
            Some(r1),
            Some(Re {
                op: Op::LeftParen(cap),
                flags,
            }),
        ) = (r1, r2)
        else {
            return Err(SizeError::Unmeasured("unbalanced parenthesis".into()));
        };
        self.flags = flags;
        let re = match cap {
            Some(cap) => Re::new(Op::Capture(Box::new(r1), cap), flags),
            None => r1,
        };
        self.push_regexp(re);
        Ok(())
    }

    fn finish(mut self) -> Result<Re, SizeError> {
        self.do_alternation();
        let re = self.stack.pop();
        match (re, self.stack.is_empty()) {
            (Some(re), true) => Ok(re),
            _ => Err(SizeError::Unmeasured("missing parenthesis".into())),
        }
    }

    /// RE2's `DoCollapse`: the items above the nearest marker become one concat
    /// or (factored) alternation; nested ones of the same kind are flattened.
    fn do_collapse(&mut self, alternate: bool) {
        let start = self
            .stack
            .iter()
            .rposition(Re::is_marker)
            .map_or(0, |i| i + 1);
        if self.stack.len() == start + 1 {
            return;
        }
        let items: Vec<Re> = self.stack.drain(start..).collect();
        let mut subs = Vec::new();
        for item in items {
            match item.op {
                Op::Concat(s) if !alternate => subs.extend(s),
                Op::Alternate(s) if alternate => subs.extend(s),
                op => subs.push(Re::new(op, item.flags)),
            }
        }
        let flags = self.flags;
        let re = if alternate {
            let subs = factor_alternation(subs, flags);
            alternate_no_factor(subs, flags)
        } else {
            concat(subs, flags)
        };
        self.stack.push(re);
    }
}

// ---------------------------------------------------------------------------
// RE2's FactorAlternation, rounds 1 to 3.

fn leading_string(re: &Re) -> (&[u32], u16) {
    let mut re = re;
    while let Op::Concat(s) = &re.op {
        match s.first() {
            Some(first) => re = first,
            None => break,
        }
    }
    let flags = re.flags & (FOLD_CASE | LATIN1);
    match &re.op {
        Op::Literal(r) => (std::slice::from_ref(r), flags),
        Op::LiteralString(s) => (s, flags),
        _ => (&[], flags),
    }
}

fn remove_leading_string(re: &mut Re, n: usize) {
    // Descend through first subs of concats.
    fn strip(re: &mut Re, n: usize) {
        if let Op::Concat(s) = &mut re.op {
            if let Some(first) = s.first_mut() {
                strip(first, n);
            }
            if s.first().is_some_and(|f| matches!(f.op, Op::EmptyMatch)) {
                s.remove(0);
                if s.len() == 1 {
                    let only = s.remove(0);
                    *re = only;
                }
            }
            return;
        }
        match &mut re.op {
            Op::Literal(_) => re.op = Op::EmptyMatch,
            Op::LiteralString(s) => {
                if n >= s.len() {
                    re.op = Op::EmptyMatch;
                } else if n == s.len() - 1 {
                    re.op = Op::Literal(s[s.len() - 1]);
                } else {
                    s.drain(..n);
                }
            }
            _ => {}
        }
    }
    strip(re, n);
}

fn leading_regexp(re: &Re) -> Option<&Re> {
    match &re.op {
        Op::EmptyMatch => None,
        Op::Concat(s) if s.len() >= 2 => {
            if matches!(s[0].op, Op::EmptyMatch) {
                None
            } else {
                Some(&s[0])
            }
        }
        _ => Some(re),
    }
}

fn remove_leading_regexp(re: Re) -> Re {
    match re.op {
        Op::EmptyMatch => re,
        Op::Concat(mut s) if s.len() >= 2 => {
            if matches!(s[0].op, Op::EmptyMatch) {
                return Re::new(Op::Concat(s), re.flags);
            }
            s.remove(0);
            if s.len() == 1 {
                return s.remove(0);
            }
            Re::new(Op::Concat(s), re.flags)
        }
        _ => Re::new(Op::EmptyMatch, re.flags),
    }
}

fn factor_alternation(subs: Vec<Re>, flags: u16) -> Vec<Re> {
    let subs = round1(subs, flags);
    let subs = round2(subs, flags);
    round3(subs, flags)
}

/// Runs of alternatives sharing a literal prefix become prefix(alternatives).
fn round1(subs: Vec<Re>, flags: u16) -> Vec<Re> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < subs.len() {
        let (first, fl) = leading_string(&subs[i]);
        let mut prefix: Vec<u32> = first.to_vec();
        let mut j = i + 1;
        while j < subs.len() {
            let (s, f) = leading_string(&subs[j]);
            if f != fl {
                break;
            }
            let same = prefix.iter().zip(s).take_while(|(a, b)| a == b).count();
            if same == 0 {
                break;
            }
            prefix.truncate(same);
            j += 1;
        }
        if j - i >= 2 {
            let mut run: Vec<Re> = subs[i..j].to_vec();
            for re in &mut run {
                remove_leading_string(re, prefix.len());
            }
            let run = factor_alternation(run, flags);
            let pre = literal_string(&prefix, fl);
            out.push(concat(vec![pre, alternate_no_factor(run, flags)], flags));
        } else {
            out.push(subs[i].clone());
        }
        i = j;
    }
    out
}

/// Runs of alternatives starting with the same simple piece share it.
fn round2(subs: Vec<Re>, flags: u16) -> Vec<Re> {
    let factorable = |re: &Re| match &re.op {
        Op::BeginLine
        | Op::EndLine
        | Op::WordBoundary
        | Op::NoWordBoundary
        | Op::BeginText
        | Op::EndText
        | Op::CharClass(_)
        | Op::AnyChar => true,
        Op::Repeat(sub, min, max) => {
            min == max && matches!(sub.op, Op::Literal(_) | Op::CharClass(_) | Op::AnyChar)
        }
        _ => false,
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < subs.len() {
        let first = leading_regexp(&subs[i]);
        let mut j = i + 1;
        if let Some(first) = first.filter(|f| factorable(f)) {
            while j < subs.len() && leading_regexp(&subs[j]).is_some_and(|f| equal(first, f)) {
                j += 1;
            }
        }
        if j - i >= 2 {
            let prefix = first
                .cloned()
                .unwrap_or_else(|| Re::new(Op::EmptyMatch, flags));
            let run: Vec<Re> = subs[i..j]
                .iter()
                .cloned()
                .map(remove_leading_regexp)
                .collect();
            let run = factor_alternation(run, flags);
            out.push(concat(vec![prefix, alternate_no_factor(run, flags)], flags));
        } else {
            out.push(subs[i].clone());
        }
        i = j;
    }
    out
}

/// Runs of literals and classes merge into one class.
fn round3(subs: Vec<Re>, flags: u16) -> Vec<Re> {
    let simple = |re: &Re| matches!(re.op, Op::Literal(_) | Op::CharClass(_));
    let mut out = Vec::new();
    let mut i = 0;
    while i < subs.len() {
        let mut j = i + 1;
        if simple(&subs[i]) {
            while j < subs.len() && simple(&subs[j]) {
                j += 1;
            }
        }
        if j - i >= 2 {
            let mut ranges = Vec::new();
            for re in &subs[i..j] {
                match &re.op {
                    Op::CharClass(r) => ranges.extend_from_slice(r),
                    Op::Literal(r) if re.flags & FOLD_CASE != 0 => {
                        ranges.extend(fold(&[(*r, *r)], re.flags))
                    }
                    Op::Literal(r) => ranges.push((*r, *r)),
                    _ => {}
                }
            }
            out.push(Re::new(
                Op::CharClass(normalize(ranges)),
                flags & !FOLD_CASE,
            ));
        } else {
            out.push(subs[i].clone());
        }
        i = j;
    }
    out
}

// ---------------------------------------------------------------------------
// RE2::Init: `^literal…` is compiled without the anchor and the literal.

fn required_prefix_suffix(re: Re) -> Re {
    let Op::Concat(subs) = &re.op else { return re };
    let anchors = subs
        .iter()
        .take_while(|s| matches!(s.op, Op::BeginText))
        .count();
    if anchors == 0 || anchors >= subs.len() {
        return re;
    }
    if !matches!(subs[anchors].op, Op::Literal(_) | Op::LiteralString(_)) {
        return re;
    }
    let rest = &subs[anchors + 1..];
    if rest.is_empty() {
        Re::new(Op::EmptyMatch, re.flags)
    } else {
        concat(rest.to_vec(), re.flags)
    }
}

// ---------------------------------------------------------------------------
// Simplify: CoalesceWalker, then SimplifyWalker.

fn coalesce(re: Re) -> Re {
    let flags = re.flags;
    match re.op {
        Op::Concat(subs) => {
            let mut subs: Vec<Re> = subs.into_iter().map(coalesce).collect();
            let mut changed = false;
            for i in 0..subs.len().saturating_sub(1) {
                if can_coalesce(&subs[i], &subs[i + 1]) {
                    do_coalesce(&mut subs, i);
                    changed = true;
                }
            }
            if changed {
                subs.retain(|s| !matches!(s.op, Op::EmptyMatch));
            }
            Re::new(Op::Concat(subs), flags)
        }
        Op::Alternate(subs) => Re::new(
            Op::Alternate(subs.into_iter().map(coalesce).collect()),
            flags,
        ),
        Op::Star(s) => Re::new(Op::Star(Box::new(coalesce(*s))), flags),
        Op::Plus(s) => Re::new(Op::Plus(Box::new(coalesce(*s))), flags),
        Op::Quest(s) => Re::new(Op::Quest(Box::new(coalesce(*s))), flags),
        Op::Repeat(s, n, m) => Re::new(Op::Repeat(Box::new(coalesce(*s)), n, m), flags),
        Op::Capture(s, c) => Re::new(Op::Capture(Box::new(coalesce(*s)), c), flags),
        op => Re::new(op, flags),
    }
}

fn repeat_parts(re: &Re) -> Option<(&Re, i32, i32)> {
    match &re.op {
        Op::Star(s) => Some((s, 0, -1)),
        Op::Plus(s) => Some((s, 1, -1)),
        Op::Quest(s) => Some((s, 0, 1)),
        Op::Repeat(s, n, m) => Some((s, *n, *m)),
        _ => None,
    }
}

fn can_coalesce(r1: &Re, r2: &Re) -> bool {
    let Some((sub1, _, _)) = repeat_parts(r1) else {
        return false;
    };
    if !matches!(sub1.op, Op::Literal(_) | Op::CharClass(_) | Op::AnyChar) {
        return false;
    }
    if let Some((sub2, _, _)) = repeat_parts(r2)
        && equal(sub1, sub2)
        && (r1.flags ^ r2.flags) & NON_GREEDY == 0
    {
        return true;
    }
    if equal(sub1, r2) {
        return true;
    }
    if let (Op::Literal(c), Op::LiteralString(s)) = (&sub1.op, &r2.op) {
        return s.first() == Some(c) && (sub1.flags ^ r2.flags) & FOLD_CASE == 0;
    }
    false
}

fn do_coalesce(subs: &mut [Re], i: usize) {
    let Some((sub1, mut min, mut max)) = repeat_parts(&subs[i]).map(|(s, n, m)| (s.clone(), n, m))
    else {
        return;
    };
    let f1 = subs[i].flags;
    let r2 = subs[i + 1].clone();
    match &r2.op {
        Op::Star(_) | Op::Plus(_) | Op::Quest(_) | Op::Repeat(..) => {
            let (_, n2, m2) = repeat_parts(&r2).unwrap_or((&r2, 0, 0));
            match &r2.op {
                Op::Star(_) => max = -1,
                Op::Plus(_) => {
                    min += 1;
                    max = -1;
                }
                Op::Quest(_) => {
                    if max != -1 {
                        max += 1;
                    }
                }
                _ => {
                    min += n2;
                    if m2 == -1 {
                        max = -1;
                    } else if max != -1 {
                        max += m2;
                    }
                }
            }
        }
        Op::LiteralString(s) => {
            let Op::Literal(c) = sub1.op else { return };
            let n = s.iter().take_while(|&&r| r == c).count().max(1);
            let n_i32 = i32::try_from(n).unwrap_or(i32::MAX);
            min += n_i32;
            if max != -1 {
                max += n_i32;
            }
            let rep = Re::new(Op::Repeat(Box::new(sub1), min, max), f1);
            if n == s.len() {
                subs[i] = Re::new(Op::EmptyMatch, 0);
                subs[i + 1] = rep;
            } else {
                subs[i] = rep;
                subs[i + 1] = literal_string(&s[n..], r2.flags);
            }
            return;
        }
        _ => {
            min += 1;
            if max != -1 {
                max += 1;
            }
        }
    }
    subs[i] = Re::new(Op::EmptyMatch, 0);
    subs[i + 1] = Re::new(Op::Repeat(Box::new(sub1), min, max), f1);
}

fn is_empty_op(re: &Re) -> bool {
    matches!(
        re.op,
        Op::BeginLine
            | Op::EndLine
            | Op::WordBoundary
            | Op::NoWordBoundary
            | Op::BeginText
            | Op::EndText
    )
}

fn simplify(re: Re) -> Re {
    let flags = re.flags;
    match re.op {
        Op::Concat(subs) => Re::new(Op::Concat(subs.into_iter().map(simplify).collect()), flags),
        Op::Alternate(subs) => Re::new(
            Op::Alternate(subs.into_iter().map(simplify).collect()),
            flags,
        ),
        Op::Capture(s, c) => Re::new(Op::Capture(Box::new(simplify(*s)), c), flags),
        op @ (Op::Star(_) | Op::Plus(_) | Op::Quest(_)) => {
            let (kind, s) = match op {
                Op::Star(s) => (b'*', s),
                Op::Plus(s) => (b'+', s),
                Op::Quest(s) => (b'?', s),
                _ => unreachable!("matched above"),
            };
            let new = simplify(*s);
            if matches!(new.op, Op::EmptyMatch) {
                return new;
            }
            let same = matches!(
                (kind, &new.op),
                (b'*', Op::Star(_)) | (b'+', Op::Plus(_)) | (b'?', Op::Quest(_))
            );
            if same && new.flags == flags {
                return new;
            }
            let b = Box::new(new);
            let op = match kind {
                b'*' => Op::Star(b),
                b'+' => Op::Plus(b),
                _ => Op::Quest(b),
            };
            Re::new(op, flags)
        }
        Op::Repeat(s, min, max) => {
            let new = simplify(*s);
            if matches!(new.op, Op::EmptyMatch) {
                return new;
            }
            simplify_repeat(new, min, max, flags)
        }
        Op::CharClass(r) if r.is_empty() => Re::new(Op::NoMatch, flags),
        // Full means every character up to U+10FFFF, which a Latin-1 class never is.
        Op::CharClass(r) if r == [(0, RUNE_MAX)] => Re::new(Op::AnyChar, flags),
        op => Re::new(op, flags),
    }
}

fn simplify_repeat(re: Re, mut min: i32, mut max: i32, f: u16) -> Re {
    let all_empty = match &re.op {
        Op::Concat(s) | Op::Alternate(s) => s.iter().all(is_empty_op),
        _ => is_empty_op(&re),
    };
    if all_empty {
        min = min.min(1);
        max = max.min(1);
    }
    if max == -1 {
        if min == 0 {
            return star_plus_quest(b'*', re, f);
        }
        if min == 1 {
            return star_plus_quest(b'+', re, f);
        }
        let mut subs: Vec<Re> = (0..min - 1).map(|_| re.clone()).collect();
        subs.push(star_plus_quest(b'+', re, f));
        return concat(subs, f);
    }
    if min == 0 && max == 0 {
        return Re::new(Op::EmptyMatch, f);
    }
    if min == 1 && max == 1 {
        return re;
    }
    let mut nre = None;
    if min > 0 {
        nre = Some(concat((0..min).map(|_| re.clone()).collect(), f));
    }
    if max > min {
        let mut suf = star_plus_quest(b'?', re.clone(), f);
        for _ in min + 1..max {
            suf = star_plus_quest(b'?', Re::new(Op::Concat(vec![re.clone(), suf]), f), f);
        }
        nre = Some(match nre {
            None => suf,
            Some(n) => Re::new(Op::Concat(vec![n, suf]), f),
        });
    }
    nre.unwrap_or_else(|| Re::new(Op::NoMatch, f))
}

/// What is left of RE2's budget of 1000 copies under `re`: each counted
/// repetition divides it by its count.
fn repetition_budget(re: &Re, budget: i64) -> i64 {
    let mut budget = budget;
    if let Op::Repeat(_, min, max) = &re.op {
        let m = if *max < 0 { *min } else { *max };
        if m > 0 {
            budget /= i64::from(m);
        }
    }
    re.subs()
        .iter()
        .map(|s| repetition_budget(s, budget))
        .fold(budget, i64::min)
}

fn remove_anchor(re: &mut Re, start: bool, depth: u32) -> bool {
    if depth >= 4 {
        return false;
    }
    match &mut re.op {
        Op::Concat(s) => {
            let sub = if start { s.first_mut() } else { s.last_mut() };
            sub.is_some_and(|sub| remove_anchor(sub, start, depth + 1))
        }
        Op::Capture(s, _) => remove_anchor(s, start, depth + 1),
        Op::BeginText if start => {
            re.op = Op::EmptyMatch;
            true
        }
        Op::EndText if !start => {
            re.op = Op::EmptyMatch;
            true
        }
        _ => false,
    }
}

// ---------------------------------------------------------------------------
// The compiler.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Code {
    Alt,
    AltMatch,
    ByteRange,
    Capture,
    EmptyWidth,
    Match,
    Nop,
    Fail,
}

#[derive(Debug, Clone, Copy)]
struct Inst {
    code: Code,
    out: u32,
    out1: u32,
    lo: u8,
    hi: u8,
    fold: bool,
}

impl Inst {
    fn new(code: Code) -> Self {
        Self {
            code,
            out: 0,
            out1: 0,
            lo: 0,
            hi: 0,
            fold: false,
        }
    }
}

/// A compiled fragment: its entry, the dangling outs (`id << 1 | is_out1`) and
/// whether it can match empty. `begin == 0` is RE2's no-match fragment.
#[derive(Debug, Clone, Default)]
struct Frag {
    begin: u32,
    end: Vec<u32>,
    nullable: bool,
}

enum Found {
    NoMatch,
    Root,
    Out1(u32),
}

struct Compiler {
    latin1: bool,
    inst: Vec<Inst>,
    rune_cache: HashMap<u64, u32>,
    rune_range: Frag,
}

impl Compiler {
    fn alloc(&mut self, i: Inst) -> u32 {
        self.inst.push(i);
        (self.inst.len() - 1) as u32
    }

    fn patch(&mut self, list: &[u32], to: u32) {
        for &p in list {
            let i = &mut self.inst[(p >> 1) as usize];
            if p & 1 == 1 {
                i.out1 = to;
            } else {
                i.out = to;
            }
        }
    }

    fn cat(&mut self, a: Frag, b: Frag) -> Frag {
        if a.begin == 0 || b.begin == 0 {
            return Frag::default();
        }
        let first = self.inst[a.begin as usize];
        if first.code == Code::Nop && a.end.first() == Some(&(a.begin << 1)) && first.out == 0 {
            self.patch(&a.end, b.begin);
            return b;
        }
        self.patch(&a.end, b.begin);
        Frag {
            begin: a.begin,
            end: b.end,
            nullable: a.nullable && b.nullable,
        }
    }

    fn alt(&mut self, a: Frag, b: Frag) -> Frag {
        if a.begin == 0 {
            return b;
        }
        if b.begin == 0 {
            return a;
        }
        let mut i = Inst::new(Code::Alt);
        i.out = a.begin;
        i.out1 = b.begin;
        let id = self.alloc(i);
        let mut end = a.end;
        end.extend(b.end);
        Frag {
            begin: id,
            end,
            nullable: a.nullable || b.nullable,
        }
    }

    fn loop_inst(&mut self, target: u32, nongreedy: bool) -> (u32, Vec<u32>) {
        let mut i = Inst::new(Code::Alt);
        let id = self.inst.len() as u32;
        let pl = if nongreedy {
            i.out1 = target;
            vec![id << 1]
        } else {
            i.out = target;
            vec![(id << 1) | 1]
        };
        self.alloc(i);
        (id, pl)
    }

    fn plus(&mut self, a: Frag, nongreedy: bool) -> Frag {
        let (id, pl) = self.loop_inst(a.begin, nongreedy);
        self.patch(&a.end, id);
        Frag {
            begin: a.begin,
            end: pl,
            nullable: a.nullable,
        }
    }

    fn star(&mut self, a: Frag, nongreedy: bool) -> Frag {
        if a.nullable {
            let p = self.plus(a, nongreedy);
            return self.quest(p, nongreedy);
        }
        let (id, pl) = self.loop_inst(a.begin, nongreedy);
        self.patch(&a.end, id);
        Frag {
            begin: id,
            end: pl,
            nullable: true,
        }
    }

    fn quest(&mut self, a: Frag, nongreedy: bool) -> Frag {
        if a.begin == 0 {
            return self.nop();
        }
        let (id, mut pl) = self.loop_inst(a.begin, nongreedy);
        pl.extend(a.end);
        Frag {
            begin: id,
            end: pl,
            nullable: true,
        }
    }

    fn byte_range(&mut self, lo: u8, hi: u8, fold: bool) -> Frag {
        let mut i = Inst::new(Code::ByteRange);
        i.lo = lo;
        i.hi = hi;
        i.fold = fold;
        let id = self.alloc(i);
        Frag {
            begin: id,
            end: vec![id << 1],
            nullable: false,
        }
    }

    fn simple(&mut self, code: Code, nullable: bool) -> Frag {
        let id = self.alloc(Inst::new(code));
        Frag {
            begin: id,
            end: vec![id << 1],
            nullable,
        }
    }

    fn nop(&mut self) -> Frag {
        self.simple(Code::Nop, true)
    }

    fn capture(&mut self, a: Frag) -> Frag {
        if a.begin == 0 {
            return Frag::default();
        }
        let mut open = Inst::new(Code::Capture);
        open.out = a.begin;
        let id = self.alloc(open);
        let close = self.alloc(Inst::new(Code::Capture));
        self.patch(&a.end, close);
        Frag {
            begin: id,
            end: vec![close << 1],
            nullable: a.nullable,
        }
    }

    fn literal(&mut self, r: u32, fold: bool) -> Frag {
        if r < 0x80 || self.latin1 {
            return self.byte_range(r as u8, r as u8, fold);
        }
        let bytes = utf8(r);
        let mut f = self.byte_range(bytes[0], bytes[0], false);
        for &b in &bytes[1..] {
            let g = self.byte_range(b, b, false);
            f = self.cat(f, g);
        }
        f
    }

    // -- UTF-8 rune ranges with shared suffixes.

    fn begin_range(&mut self) {
        self.rune_cache.clear();
        self.rune_range = Frag::default();
    }

    fn uncached_suffix(&mut self, lo: u8, hi: u8, fold: bool, next: u32) -> u32 {
        let f = self.byte_range(lo, hi, fold);
        if next != 0 {
            self.patch(&f.end, next);
        } else {
            self.rune_range.end.extend(f.end);
        }
        f.begin
    }

    fn cache_key(lo: u8, hi: u8, fold: bool, next: u32) -> u64 {
        (u64::from(next) << 17) | (u64::from(lo) << 9) | (u64::from(hi) << 1) | u64::from(fold)
    }

    fn cached_suffix(&mut self, lo: u8, hi: u8, fold: bool, next: u32) -> u32 {
        let key = Self::cache_key(lo, hi, fold, next);
        if let Some(&id) = self.rune_cache.get(&key) {
            return id;
        }
        let id = self.uncached_suffix(lo, hi, fold, next);
        self.rune_cache.insert(key, id);
        id
    }

    fn is_cached(&self, id: u32) -> bool {
        let i = self.inst[id as usize];
        self.rune_cache
            .contains_key(&Self::cache_key(i.lo, i.hi, i.fold, i.out))
    }

    fn add_suffix(&mut self, id: u32) {
        if self.rune_range.begin == 0 {
            self.rune_range.begin = id;
            return;
        }
        if self.latin1 {
            let mut alt = Inst::new(Code::Alt);
            alt.out = self.rune_range.begin;
            alt.out1 = id;
            self.rune_range.begin = self.alloc(alt);
            return;
        }
        self.rune_range.begin = self.add_suffix_recursive(self.rune_range.begin, id);
    }

    fn same_range(&self, a: u32, b: u32) -> bool {
        let (x, y) = (self.inst[a as usize], self.inst[b as usize]);
        x.lo == y.lo && x.hi == y.hi && x.fold == y.fold
    }

    fn find_byte_range(&self, root: u32, id: u32) -> Found {
        let r = self.inst[root as usize];
        if r.code == Code::ByteRange {
            return if self.same_range(root, id) {
                Found::Root
            } else {
                Found::NoMatch
            };
        }
        // Forward programs only look at the newest alternative.
        if r.code == Code::Alt && self.same_range(r.out1, id) {
            return Found::Out1(root);
        }
        Found::NoMatch
    }

    fn add_suffix_recursive(&mut self, mut root: u32, id: u32) -> u32 {
        let found = self.find_byte_range(root, id);
        let mut br = match found {
            Found::NoMatch => {
                let mut i = Inst::new(Code::Alt);
                i.out = root;
                i.out1 = id;
                return self.alloc(i);
            }
            Found::Root => root,
            Found::Out1(at) => self.inst[at as usize].out1,
        };
        if self.is_cached(br) {
            // The matching suffix is shared: copy it before extending it.
            let mut copy = self.inst[br as usize];
            copy.code = Code::ByteRange;
            br = self.alloc(copy);
            match found {
                Found::Root => root = br,
                Found::Out1(at) => self.inst[at as usize].out1 = br,
                Found::NoMatch => {}
            }
        }
        let out = self.inst[id as usize].out;
        if !self.is_cached(id) {
            // RE2 gives back the newest instruction (`id` is it whenever this
            // happens in a forward program).
            self.inst[id as usize] = Inst::new(Code::Alt);
            self.inst.pop();
        }
        let next = self.inst[br as usize].out;
        let out = self.add_suffix_recursive(next, out);
        if out == 0 {
            return 0;
        }
        self.inst[br as usize].out = out;
        root
    }

    fn add_80_10ffff(&mut self) {
        let cont1 = self.uncached_suffix(0x80, 0xBF, false, 0);
        let id = self.uncached_suffix(0xC2, 0xDF, false, cont1);
        self.add_suffix(id);
        let cont2 = self.uncached_suffix(0x80, 0xBF, false, cont1);
        let id = self.uncached_suffix(0xE0, 0xEF, false, cont2);
        self.add_suffix(id);
        let cont3 = self.uncached_suffix(0x80, 0xBF, false, cont2);
        let id = self.uncached_suffix(0xF0, 0xF4, false, cont3);
        self.add_suffix(id);
    }

    fn add_rune_range(&mut self, lo: u32, hi: u32, fold: bool) {
        if self.latin1 {
            if lo > hi || lo > 0xFF {
                return;
            }
            let id = self.uncached_suffix(lo as u8, hi.min(0xFF) as u8, fold, 0);
            self.add_suffix(id);
            return;
        }
        if lo > hi {
            return;
        }
        if lo == 0x80 && hi == 0x10FFFF {
            self.add_80_10ffff();
            return;
        }
        // Split into ranges whose UTF-8 encodings have the same length.
        for len in 1..4 {
            let max = max_rune(len);
            if lo <= max && max < hi {
                self.add_rune_range(lo, max, fold);
                self.add_rune_range(max + 1, hi, fold);
                return;
            }
        }
        if hi < 0x80 {
            let id = self.uncached_suffix(lo as u8, hi as u8, fold, 0);
            self.add_suffix(id);
            return;
        }
        // Split so that every continuation byte spans a whole 0x80-0xBF or one value.
        for i in 1..4 {
            let m: u32 = (1 << (6 * i)) - 1;
            if lo & !m != hi & !m {
                if lo & m != 0 {
                    self.add_rune_range(lo, lo | m, fold);
                    self.add_rune_range((lo | m) + 1, hi, fold);
                    return;
                }
                if hi & m != m {
                    self.add_rune_range(lo, (hi & !m) - 1, fold);
                    self.add_rune_range(hi & !m, hi, fold);
                    return;
                }
            }
        }
        let ulo = utf8(lo);
        let uhi = utf8(hi);
        let n = ulo.len();
        let mut id = 0;
        for i in (0..n).rev() {
            if i == n - 1 || (ulo[i] < uhi[i] && i != 0) {
                id = self.cached_suffix(ulo[i], uhi[i], false, id);
            } else {
                id = self.uncached_suffix(ulo[i], uhi[i], false, id);
            }
        }
        self.add_suffix(id);
    }

    fn char_class(&mut self, ranges: &[(u32, u32)]) -> Frag {
        // RE2's FoldsASCII: every ASCII letter's other case is in the class too.
        let (mut upper, mut lower) = (0u32, 0u32);
        for &(lo, hi) in ranges {
            for c in lo.max(u32::from(b'A'))..=hi.min(u32::from(b'Z')) {
                upper |= 1 << (c - u32::from(b'A'));
            }
            for c in lo.max(u32::from(b'a'))..=hi.min(u32::from(b'z')) {
                lower |= 1 << (c - u32::from(b'a'));
            }
        }
        let folds_ascii = upper == lower;
        self.begin_range();
        for &(lo, hi) in ranges {
            let (a, z, big_z, small_a) = (0x41, 0x7A, 0x5A, 0x61);
            if folds_ascii && a <= lo && hi <= big_z {
                continue;
            }
            let fold = folds_ascii
                && !((lo <= a && z <= hi) || hi < a || z < lo || (big_z < lo && hi < small_a));
            self.add_rune_range(lo, hi, fold);
        }
        std::mem::take(&mut self.rune_range)
    }

    fn walk(&mut self, re: &Re) -> Frag {
        let nongreedy = re.flags & NON_GREEDY != 0;
        match &re.op {
            Op::NoMatch | Op::LeftParen(_) | Op::VerticalBar | Op::Repeat(..) => Frag::default(),
            Op::EmptyMatch => self.nop(),
            Op::Concat(subs) => {
                let frags: Vec<Frag> = subs.iter().map(|s| self.walk(s)).collect();
                let mut it = frags.into_iter();
                let mut f = it.next().unwrap_or_default();
                for g in it {
                    f = self.cat(f, g);
                }
                f
            }
            Op::Alternate(subs) => {
                let frags: Vec<Frag> = subs.iter().map(|s| self.walk(s)).collect();
                let mut it = frags.into_iter();
                let mut f = it.next().unwrap_or_default();
                for g in it {
                    f = self.alt(f, g);
                }
                f
            }
            Op::Star(s) => {
                let f = self.walk(s);
                self.star(f, nongreedy)
            }
            Op::Plus(s) => {
                let f = self.walk(s);
                self.plus(f, nongreedy)
            }
            Op::Quest(s) => {
                let f = self.walk(s);
                self.quest(f, nongreedy)
            }
            Op::Literal(r) => self.literal(*r, re.flags & FOLD_CASE != 0),
            Op::LiteralString(runes) => {
                let fold = re.flags & FOLD_CASE != 0;
                let mut f: Option<Frag> = None;
                for &r in runes {
                    let g = self.literal(r, fold);
                    f = Some(match f {
                        None => g,
                        Some(f) => self.cat(f, g),
                    });
                }
                f.unwrap_or_else(|| self.nop())
            }
            Op::AnyChar => self.char_class(&[(0, RUNE_MAX)]),
            Op::CharClass(ranges) => self.char_class(ranges),
            Op::Capture(s, _) => {
                let f = self.walk(s);
                self.capture(f)
            }
            Op::BeginLine
            | Op::EndLine
            | Op::BeginText
            | Op::EndText
            | Op::WordBoundary
            | Op::NoWordBoundary => self.simple(Code::EmptyWidth, true),
        }
    }
}

fn max_rune(len: u32) -> u32 {
    let bits = if len == 1 {
        7
    } else {
        8 - (len + 1) + 6 * (len - 1)
    };
    (1 << bits) - 1
}

fn utf8(r: u32) -> Vec<u8> {
    let r = if r > RUNE_MAX { 0xFFFD } else { r };
    match r {
        0..=0x7F => vec![r as u8],
        0x80..=0x7FF => vec![0xC0 | (r >> 6) as u8, 0x80 | (r & 0x3F) as u8],
        0x800..=0xFFFF => vec![
            0xE0 | (r >> 12) as u8,
            0x80 | ((r >> 6) & 0x3F) as u8,
            0x80 | (r & 0x3F) as u8,
        ],
        _ => vec![
            0xF0 | (r >> 18) as u8,
            0x80 | ((r >> 12) & 0x3F) as u8,
            0x80 | ((r >> 6) & 0x3F) as u8,
            0x80 | (r & 0x3F) as u8,
        ],
    }
}

/// Compiles the parsed regexp and returns the flattened program's size.
fn compile(re: Re, encoding: Encoding) -> u32 {
    let mut re = simplify(coalesce(re));
    let anchor_start = remove_anchor(&mut re, true, 0);
    remove_anchor(&mut re, false, 0);
    let mut c = Compiler {
        latin1: encoding == Encoding::Latin1,
        inst: vec![Inst::new(Code::Fail)],
        rune_cache: HashMap::new(),
        rune_range: Frag::default(),
    };
    let all = c.walk(&re);
    let m = c.simple(Code::Match, false);
    let m = Frag {
        end: Vec::new(),
        ..m
    };
    let all = c.cat(all, m);
    let start = all.begin;
    let unanchored = if anchor_start {
        start
    } else {
        // The unanchored form starts with a non-greedy `.*` over bytes.
        let any = c.byte_range(0x00, 0xFF, false);
        let dot_star = c.star(any, true);
        c.cat(dot_star, all).begin
    };
    if start == 0 && unanchored == 0 {
        return 1;
    }
    optimize(&mut c.inst, start);
    flatten_size(&c.inst, start, unanchored)
}

/// A set of instruction ids that empties in O(1): a member carries the
/// current generation (RE2's SparseSet, for the same reason: one per list).
struct Marks {
    stamp: Vec<u32>,
    generation: u32,
    members: Vec<u32>,
}

impl Marks {
    fn new(n: usize) -> Self {
        Self {
            stamp: vec![0; n],
            generation: 1,
            members: Vec::new(),
        }
    }

    fn clear(&mut self) {
        self.generation += 1;
        self.members.clear();
    }

    fn contains(&self, id: u32) -> bool {
        self.stamp[id as usize] == self.generation
    }

    /// Adds `id`; false if it was there.
    fn insert(&mut self, id: u32) -> bool {
        if self.contains(id) {
            return false;
        }
        self.stamp[id as usize] = self.generation;
        self.members.push(id);
        true
    }
}

/// `Prog::Optimize`: skips Nops, marks `.*` loops before a match.
fn optimize(inst: &mut [Inst], start: u32) {
    let mut q = Marks::new(inst.len());
    let add = |q: &mut Marks, id: u32| {
        if id != 0 {
            q.insert(id);
        }
    };
    add(&mut q, start);
    let mut k = 0;
    while k < q.members.len() {
        let id = q.members[k] as usize;
        k += 1;
        let skip = |inst: &[Inst], mut j: u32| {
            while j != 0 && inst[j as usize].code == Code::Nop {
                j = inst[j as usize].out;
            }
            j
        };
        let out = skip(inst, inst[id].out);
        inst[id].out = out;
        add(&mut q, out);
        if inst[id].code == Code::Alt {
            let out1 = skip(inst, inst[id].out1);
            inst[id].out1 = out1;
            add(&mut q, out1);
        }
    }
    let is_match = |inst: &[Inst], mut id: u32| loop {
        let i = inst[id as usize];
        match i.code {
            Code::Capture | Code::Nop => id = i.out,
            Code::Match => return true,
            _ => return false,
        }
    };
    q.clear();
    add(&mut q, start);
    let mut k = 0;
    while k < q.members.len() {
        let id = q.members[k];
        k += 1;
        let ip = inst[id as usize];
        add(&mut q, ip.out);
        if ip.code == Code::Alt {
            add(&mut q, ip.out1);
            let (j, kk) = (inst[ip.out as usize], inst[ip.out1 as usize]);
            let any_loop =
                |b: Inst| b.code == Code::ByteRange && b.out == id && b.lo == 0 && b.hi == 0xFF;
            if (any_loop(j) && is_match(inst, ip.out1)) || (is_match(inst, ip.out) && any_loop(kk))
            {
                inst[id as usize].code = Code::AltMatch;
            }
        }
    }
}

/// `Prog::Flatten`'s instruction count.
fn flatten_size(inst: &[Inst], start: u32, unanchored: u32) -> u32 {
    let n = inst.len();
    // The roots, in the order they were found, and membership by id.
    let mut roots: Vec<u32> = Vec::new();
    let mut is_root = vec![false; n];
    let add_root = |roots: &mut Vec<u32>, is_root: &mut Vec<bool>, id: u32| {
        if !is_root[id as usize] {
            is_root[id as usize] = true;
            roots.push(id);
        }
    };
    add_root(&mut roots, &mut is_root, 0);
    add_root(&mut roots, &mut is_root, unanchored);
    add_root(&mut roots, &mut is_root, start);
    // Successor roots and predecessors.
    let mut preds: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut seen = Marks::new(n);
    let mut stk = vec![unanchored];
    while let Some(mut id) = stk.pop() {
        loop {
            if !seen.insert(id) {
                break;
            }
            let ip = inst[id as usize];
            match ip.code {
                Code::Alt | Code::AltMatch => {
                    preds[ip.out as usize].push(id);
                    preds[ip.out1 as usize].push(id);
                    stk.push(ip.out1);
                    id = ip.out;
                }
                Code::ByteRange | Code::Capture | Code::EmptyWidth => {
                    add_root(&mut roots, &mut is_root, ip.out);
                    id = ip.out;
                }
                Code::Nop => id = ip.out,
                Code::Match | Code::Fail => break,
            }
        }
    }
    // Dominator roots, highest id first: an instruction reached from a root
    // through Alts and Nops, with a predecessor that root does not reach,
    // becomes a root too.
    let mut sorted = roots.clone();
    sorted.sort_unstable();
    for &root in sorted.iter().skip(1).rev() {
        if root == unanchored || root == start {
            continue;
        }
        seen.clear();
        let mut stk = vec![root];
        while let Some(mut id) = stk.pop() {
            loop {
                if !seen.insert(id) || (id != root && is_root[id as usize]) {
                    break;
                }
                let ip = inst[id as usize];
                match ip.code {
                    Code::Alt | Code::AltMatch => {
                        stk.push(ip.out1);
                        id = ip.out;
                    }
                    Code::Nop => id = ip.out,
                    _ => break,
                }
            }
        }
        let reached = std::mem::take(&mut seen.members);
        for &id in &reached {
            if preds[id as usize].iter().any(|&p| !seen.contains(p)) {
                add_root(&mut roots, &mut is_root, id);
            }
        }
        seen.members = reached;
    }
    // Emit one list per root.
    let mut total = 0u32;
    for &root in &roots {
        seen.clear();
        let mut stk = vec![root];
        while let Some(mut id) = stk.pop() {
            loop {
                if !seen.insert(id) {
                    break;
                }
                if id != root && is_root[id as usize] {
                    total += 1; // a Nop to the other list
                    break;
                }
                let ip = inst[id as usize];
                match ip.code {
                    Code::AltMatch | Code::Alt => {
                        if ip.code == Code::AltMatch {
                            total += 1;
                        }
                        stk.push(ip.out1);
                        id = ip.out;
                    }
                    Code::Nop => id = ip.out,
                    _ => {
                        total += 1;
                        break;
                    }
                }
            }
        }
    }
    total
}

#[cfg(test)]
#[path = "re2_program_tests.rs"]
mod tests;
