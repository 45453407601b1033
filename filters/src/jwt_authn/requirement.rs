//! Requirement evaluation (envoy-reference 2.2 steps 3, 4 and 6). Pure: it decides and
//! collects the verified tokens; the filter applies their effects (headers, metadata) only
//! when the whole requirement passed.

use super::extract::{Extracted, Location, extract};
use super::status::Status;
use super::token::{self, ParsedJwt};
use super::token_cache::CachedJwt;
use super::{JwtAuthnFilter, now_secs};
use courier_config::filters::jwt_authn::{Jwks, JwksSource, JwtRequirement};
use http::request::Parts;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// A verified token, ready for its effects.
#[derive(Debug)]
pub struct Verified<'p> {
    /// Index of the provider that verified it.
    pub provider: usize,
    /// Where it was found.
    pub location: Location<'p>,
    /// The compact token.
    pub token: String,
    /// The parsed token.
    pub jwt: JwtRef,
}

/// A parsed token, shared with the cache or owned.
#[derive(Debug)]
pub enum JwtRef {
    /// From (or now in) the token cache.
    Cached(Arc<CachedJwt>),
    /// Verified without a cache.
    Owned(Box<ParsedJwt>),
}

impl std::ops::Deref for JwtRef {
    type Target = ParsedJwt;
    fn deref(&self) -> &ParsedJwt {
        match self {
            Self::Cached(c) => &c.jwt,
            Self::Owned(j) => j,
        }
    }
}

/// Why evaluation stopped.
#[derive(Debug)]
pub enum Stop {
    /// The requirement failed.
    Failed(Status),
    /// Provider `.0` needs its remote JWKS fetched first.
    NeedFetch(usize),
}

/// A token that failed, for `failed_status_in_metadata`: the provider it was checked
/// against (`None` when none was resolved: no token, unknown issuer) and why.
pub type Failure = (Option<usize>, Status);

/// Key sets fetched during this request: `(provider, keys)`, `None` keys = fetch failed.
pub type Fetched = [(usize, Option<Arc<Jwks>>)];

/// Evaluation of one request.
pub struct Eval<'f, 'x> {
    /// The filter.
    pub filter: &'f JwtAuthnFilter,
    /// The request head.
    pub head: &'x Parts,
    /// JWKS fetched during this request.
    pub fetched: &'x Fetched,
    /// The worker evaluating it (its copy of the filter's counters).
    pub worker: usize,
}

impl<'f> Eval<'f, '_> {
    /// Evaluates `req`; on success, the verified tokens. Every token failure met on the
    /// way (also in alternatives that did not decide) is added to `failed`.
    pub fn run(
        &self,
        req: &JwtRequirement,
        failed: &mut Vec<Failure>,
    ) -> Result<Vec<Verified<'f>>, Stop> {
        let mut out = Vec::new();
        self.eval(req, &mut out, failed)?;
        Ok(out)
    }

    fn eval(
        &self,
        req: &JwtRequirement,
        out: &mut Vec<Verified<'f>>,
        failed: &mut Vec<Failure>,
    ) -> Result<(), Stop> {
        match req {
            JwtRequirement::AllowAll => Ok(()),
            JwtRequirement::Provider {
                provider,
                audiences,
            } => {
                let p = self
                    .filter
                    .provider(*provider)
                    .ok_or(Stop::Failed(Status::Missing))?;
                let mut tokens = Vec::new();
                extract(p, self.head, &mut tokens);
                if tokens.is_empty() {
                    // Envoy has no provider data for a missing token (see `record`).
                    failed.push((None, Status::Missing));
                    return Err(Stop::Failed(Status::Missing));
                }
                for t in tokens {
                    let jwt = self
                        .verify(*provider, audiences.as_deref(), &t.token, true)
                        .inspect_err(|e| {
                            if let Stop::Failed(s) = e {
                                failed.push((Some(*provider), *s));
                            }
                        })?;
                    out.push(Verified {
                        provider: *provider,
                        location: t.location,
                        token: t.token,
                        jwt,
                    });
                }
                Ok(())
            }
            JwtRequirement::RequiresAll(list) => {
                for r in list {
                    self.eval(r, out, failed)?;
                }
                Ok(())
            }
            JwtRequirement::RequiresAny(list) => {
                let mut worst: Option<Status> = None;
                for r in list {
                    let mut branch = Vec::new();
                    match self.eval(r, &mut branch, failed) {
                        Ok(()) => {
                            out.extend(branch);
                            return Ok(());
                        }
                        Err(Stop::NeedFetch(p)) => return Err(Stop::NeedFetch(p)),
                        Err(Stop::Failed(s)) => {
                            // The first failure of the highest rank is reported.
                            if worst.is_none_or(|w| s.rank() > w.rank()) {
                                worst = Some(s);
                            }
                        }
                    }
                }
                Err(Stop::Failed(worst.unwrap_or(Status::Missing)))
            }
            JwtRequirement::AllowMissing => self.any_provider(out, false, failed),
            JwtRequirement::AllowMissingOrFailed => self.any_provider(out, true, failed),
        }
    }

    /// `allow_missing` / `allow_missing_or_failed`: every token of every provider, each
    /// verified by the provider its `iss` names.
    fn any_provider(
        &self,
        out: &mut Vec<Verified<'f>>,
        ignore_failures: bool,
        failed: &mut Vec<Failure>,
    ) -> Result<(), Stop> {
        let mut seen: Vec<Extracted<'f>> = Vec::new();
        for p in &self.filter.config.providers {
            extract(p, self.head, &mut seen);
        }
        seen.dedup_by(|a, b| a.token == b.token);
        for t in seen {
            let result = self.by_issuer(&t.token);
            match result {
                Ok((provider, jwt)) => out.push(Verified {
                    provider,
                    location: t.location,
                    token: t.token,
                    jwt,
                }),
                Err((_, Stop::NeedFetch(p))) => return Err(Stop::NeedFetch(p)),
                Err((provider, Stop::Failed(s))) => {
                    failed.push((provider, s));
                    if !ignore_failures {
                        return Err(Stop::Failed(s));
                    }
                }
            }
        }
        Ok(())
    }

    /// Verifies `token` with the provider its `iss` names; a failure says which provider
    /// it was checked against, if one was found.
    fn by_issuer(&self, token: &str) -> Result<(usize, JwtRef), (Option<usize>, Stop)> {
        let iss = match token::parse(token) {
            Ok(j) => j.issuer().to_string(),
            Err(s) => return Err((None, Stop::Failed(s))),
        };
        let providers = &self.filter.config.providers;
        let i = providers
            .iter()
            .position(|p| p.issuer == iss)
            .or_else(|| providers.iter().position(|p| p.issuer.is_empty()))
            .ok_or((None, Stop::Failed(Status::UnknownIssuer)))?;
        let jwt = self
            .verify(i, None, token, false)
            .map_err(|e| (Some(i), e))?;
        Ok((i, jwt))
    }

    /// Verifies `token` for provider `i`.
    fn verify(
        &self,
        i: usize,
        audiences: Option<&[String]>,
        token: &str,
        check_issuer: bool,
    ) -> Result<JwtRef, Stop> {
        let f = self.filter;
        let p = f.provider(i).ok_or(Stop::Failed(Status::UnknownIssuer))?;
        let now = now_secs();
        let cache = f.runtime[i].cache.as_ref();
        if let Some(hit) = cache.and_then(|c| c.get(token)) {
            f.stats
                .get(self.worker)
                .jwt_cache_hit
                .fetch_add(1, Ordering::Relaxed);
            token::check_claims(p, audiences, &hit.jwt, now).map_err(Stop::Failed)?;
            return Ok(JwtRef::Cached(hit));
        }
        if cache.is_some() {
            f.stats
                .get(self.worker)
                .jwt_cache_miss
                .fetch_add(1, Ordering::Relaxed);
        }
        let jwt = token::parse(token).map_err(Stop::Failed)?;
        if check_issuer && !p.issuer.is_empty() && jwt.issuer() != p.issuer {
            return Err(Stop::Failed(Status::UnknownIssuer));
        }
        token::check_claims(p, audiences, &jwt, now).map_err(Stop::Failed)?;
        let keys = self.keys(i)?;
        token::verify_signature(token, &jwt, &keys).map_err(Stop::Failed)?;
        Ok(match cache.and_then(|c| c.insert(token, jwt.clone())) {
            Some(entry) => JwtRef::Cached(entry),
            None => JwtRef::Owned(Box::new(jwt)),
        })
    }

    fn keys(&self, i: usize) -> Result<Arc<Jwks>, Stop> {
        let p = self
            .filter
            .provider(i)
            .ok_or(Stop::Failed(Status::FetchFail))?;
        match &p.jwks {
            JwksSource::Local(k) => Ok(Arc::clone(k)),
            JwksSource::Remote(_) => {
                if let Some((_, got)) = self.fetched.iter().find(|(p, _)| *p == i) {
                    return got.clone().ok_or(Stop::Failed(Status::FetchFail));
                }
                match self.filter.runtime[i].remote.as_ref().map(|r| r.lookup()) {
                    Some(super::jwks_cache::Lookup::Fresh(k)) => Ok(k),
                    Some(super::jwks_cache::Lookup::NeedFetch) => Err(Stop::NeedFetch(i)),
                    None => Err(Stop::Failed(Status::FetchFail)),
                }
            }
        }
    }
}
