//! PEMs for unit tests: a self-signed P-256 certificate (CN=courier-test,
//! SAN DNS:courier.test) and its key, generated for courier with `openssl req -x509`.

/// The certificate.
pub(crate) const CERT: &str = "\
-----BEGIN CERTIFICATE-----
MIIBnzCCAUSgAwIBAgIUOl1hbTQe2WGz1/e0dyEmojOVdBswCgYIKoZIzj0EAwIw
FzEVMBMGA1UEAwwMY291cmllci10ZXN0MCAXDTI2MTIwMjE2MDYwN1oYDzIxMjYx
MTA4MTYwNjA3WjAXMRUwEwYDVQQDDAxjb3VyaWVyLXRlc3QwWTATBgcqhkjOPQIB
BggqhkjOPQMBBwNCAARHxdLrtakEonNOk86rOlqZ5vEiUZh9CEbpmTpet7r6wWW8
j9vWrcAblkAqSOwisMxT6HpUidXRqVJysUHJgO6Bo2wwajAdBgNVHQ4EFgQUF7lc
Uj4hhxfSFgdvXQMGBXzBphwwHwYDVR0jBBgwFoAUF7lcUj4hhxfSFgdvXQMGBXzB
phwwDwYDVR0TAQH/BAUwAwEB/zAXBgNVHREEEDAOggxjb3VyaWVyLnRlc3QwCgYI
KoZIzj0EAwIDSQAwRgIhAO4RI9nufdJTC2Wn3mkriUvte3RMjCEqUqnp8EyOaI9u
AiEAqOvCOkAzpAtGLxgNB0catHpxMuCGMtI1tGqS8nyaiVU=
-----END CERTIFICATE-----
";

/// Its private key (PKCS#8).
pub(crate) const KEY: &str = "\
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgMJTeWj5Rkq3PmiRN
+VdMR/pm/nUwxDaWDmDu2IQiiGShRANCAARHxdLrtakEonNOk86rOlqZ5vEiUZh9
CEbpmTpet7r6wWW8j9vWrcAblkAqSOwisMxT6HpUidXRqVJysUHJgO6B
-----END PRIVATE KEY-----
";
