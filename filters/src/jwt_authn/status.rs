//! Verification outcomes and the strings Envoy (jwt_verify_lib) reports for them.

/// Why a token (or a requirement) failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// No token in any location of the provider.
    Missing,
    /// `nbf` is in the future (beyond the clock skew).
    NotYetValid,
    /// `exp` is in the past (beyond the clock skew).
    Expired,
    /// Not three dot-separated sections.
    BadFormat,
    /// The header is not base64url JSON.
    HeaderParse,
    /// The header has no string `alg`.
    HeaderBadAlg,
    /// `alg` is not one courier verifies (`none` included).
    AlgNotImplemented,
    /// The payload is not base64url JSON.
    PayloadParse,
    /// `iss` is not the provider's.
    UnknownIssuer,
    /// No audience of the token is allowed.
    AudienceNotAllowed,
    /// The signature does not verify (also: subject not allowed, lifetime too long,
    /// missing `exp` with `require_expiration`; jwt_verify_lib has no closer string).
    VerificationFail,
    /// No key of the JWKS has the token's `kid` and `alg`.
    KidAlgMismatch,
    /// The remote JWKS could not be fetched or parsed.
    FetchFail,
}

impl Status {
    /// The body of the 401/403 Envoy answers with.
    pub fn message(self) -> &'static str {
        match self {
            Self::Missing => "Jwt is missing",
            Self::NotYetValid => "Jwt not yet valid",
            Self::Expired => "Jwt is expired",
            Self::BadFormat => {
                "Jwt is not in the form of Header.Payload.Signature with two dots and 3 sections"
            }
            Self::HeaderParse => "Jwt header is an invalid JSON",
            Self::HeaderBadAlg => "Jwt header [alg] field is required and must be a string",
            Self::AlgNotImplemented => "Jwt header [alg] is not supported",
            Self::PayloadParse => "Jwt payload is an invalid JSON",
            Self::UnknownIssuer => "Jwt issuer is not configured",
            Self::AudienceNotAllowed => "Audiences in Jwt are not allowed",
            Self::VerificationFail => "Jwt verification fails",
            Self::KidAlgMismatch => "Jwks doesn't have key to match kid or alg from Jwt",
            Self::FetchFail => "Jwks remote fetch is failed",
        }
    }

    /// Envoy's number for the status (`JwtVerify::Status`), as `failed_status_in_metadata`
    /// reports it. A header that is not base64url reports the JSON failure's number, as
    /// courier does not tell them apart.
    pub fn code(self) -> u32 {
        match self {
            Self::Missing => 1,
            Self::NotYetValid => 2,
            Self::Expired => 3,
            Self::BadFormat => 4,
            Self::HeaderParse => 6,
            Self::HeaderBadAlg => 7,
            Self::AlgNotImplemented => 8,
            Self::PayloadParse => 11,
            Self::UnknownIssuer => 24,
            Self::AudienceNotAllowed => 25,
            Self::VerificationFail => 26,
            Self::KidAlgMismatch => 32,
            Self::FetchFail => 40,
        }
    }

    /// `requires_any` reports, when every alternative failed, a failure that is neither
    /// Missing nor UnknownIssuer if there is one, else UnknownIssuer, else Missing.
    pub(crate) fn rank(self) -> u8 {
        match self {
            Self::Missing => 0,
            Self::UnknownIssuer => 1,
            _ => 2,
        }
    }
}
