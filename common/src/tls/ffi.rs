//! OpenSSL's TLS 1.3 external-PSK callbacks, which the `openssl` crate does not wrap:
//! `SSL_CTX_set_psk_find_session_callback` (controller) and
//! `SSL_CTX_set_psk_use_session_callback` (host). The only `unsafe` of the TLS layer
//! lives here. Each callback finds its connection's [`PskRole`] in the SSL's ex-data
//! (set by [`super::handshake`] before the handshake starts) and answers with a
//! session whose master key is the TLS PSK and whose cipher suite is the PSK's
//! (TLS_AES_128_GCM_SHA256 or TLS_AES_256_GCM_SHA384), as RFC 8446 and OpenSSL's
//! `SSL_CTX_set_psk_find_session_callback(3)` describe. The older TLS 1.2-style
//! callbacks the crate does wrap cannot carry SHA-384 keys.

use std::ffi::{c_int, c_uchar};
use std::ptr;
use std::sync::OnceLock;

use foreign_types::ForeignTypeRef;
use openssl::ex_data::Index;
use openssl::ssl::{Ssl, SslContextBuilder, SslRef};
use openssl_sys::{EVP_MD, SSL, SSL_CIPHER, SSL_CTX, SSL_SESSION, TLS1_3_VERSION};

use super::psk::PskHash;
use super::role::PskRole;

/// IANA cipher suite codes (RFC 8446 B.4).
const TLS_AES_128_GCM_SHA256: [u8; 2] = [0x13, 0x01];
const TLS_AES_256_GCM_SHA384: [u8; 2] = [0x13, 0x02];
/// What the callbacks return: 1 continues the handshake (with or without a session).
const CALLBACK_OK: c_int = 1;
const CALLBACK_FAIL: c_int = 0;

type FindSessionCb =
    unsafe extern "C" fn(*mut SSL, *const c_uchar, usize, *mut *mut SSL_SESSION) -> c_int;
type UseSessionCb = unsafe extern "C" fn(
    *mut SSL,
    *const EVP_MD,
    *mut *const c_uchar,
    *mut usize,
    *mut *mut SSL_SESSION,
) -> c_int;

extern "C" {
    fn SSL_CTX_set_psk_find_session_callback(ctx: *mut SSL_CTX, cb: Option<FindSessionCb>);
    fn SSL_CTX_set_psk_use_session_callback(ctx: *mut SSL_CTX, cb: Option<UseSessionCb>);
    fn SSL_SESSION_new() -> *mut SSL_SESSION;
    fn SSL_SESSION_set1_master_key(s: *mut SSL_SESSION, key: *const c_uchar, len: usize) -> c_int;
    fn SSL_SESSION_set_cipher(s: *mut SSL_SESSION, cipher: *const SSL_CIPHER) -> c_int;
    fn SSL_SESSION_set_protocol_version(s: *mut SSL_SESSION, version: c_int) -> c_int;
    fn SSL_CIPHER_find(ssl: *mut SSL, ptr: *const c_uchar) -> *const SSL_CIPHER;
    fn SSL_set_read_ahead(ssl: *mut SSL, yes: c_int);
    fn SSL_set_default_read_buffer_len(ssl: *mut SSL, len: usize);
    fn SSL_has_pending(ssl: *const SSL) -> c_int;
}

/// Lets OpenSSL read as much as the socket has (up to `buffer` bytes) in one `read`,
/// instead of a record header and then its body: fewer system calls per record. Only
/// once the keys stay in user space: read-ahead bytes could not go to kernel TLS.
pub(super) fn read_ahead(ssl: &SslRef, buffer: usize) {
    // SAFETY: `ssl` is a live SSL whose owner holds it exclusively while this runs (the
    // caller has it by `&mut`); both calls only set fields of it.
    unsafe {
        SSL_set_default_read_buffer_len(ssl.as_ptr(), buffer);
        SSL_set_read_ahead(ssl.as_ptr(), 1);
    }
}

/// Whether OpenSSL holds bytes not yet returned, decrypted or not (with read-ahead, a
/// whole record may wait in its buffer where epoll cannot see it).
pub(super) fn has_pending(ssl: &SslRef) -> bool {
    // SAFETY: `ssl` is a live SSL; the call only reads its buffers' state.
    unsafe { SSL_has_pending(ssl.as_ptr()) == 1 }
}

/// The ex-data slot that holds a connection's [`PskRole`].
pub(super) fn role_index() -> Result<Index<Ssl, PskRole>, openssl::error::ErrorStack> {
    static INDEX: OnceLock<Index<Ssl, PskRole>> = OnceLock::new();
    if let Some(i) = INDEX.get() {
        return Ok(*i);
    }
    let i = Ssl::new_ex_index::<PskRole>()?;
    Ok(*INDEX.get_or_init(|| i))
}

/// Installs the controller's callback on a context.
pub(super) fn install_find_session(ctx: &mut SslContextBuilder) {
    // SAFETY: `ctx` is a live SSL_CTX owned by the builder; the callback is a plain
    // function with the signature OpenSSL expects.
    unsafe { SSL_CTX_set_psk_find_session_callback(ctx.as_ptr(), Some(find_session)) }
}

/// Installs the host's callback on a context.
pub(super) fn install_use_session(ctx: &mut SslContextBuilder) {
    // SAFETY: as in `install_find_session`.
    unsafe { SSL_CTX_set_psk_use_session_callback(ctx.as_ptr(), Some(use_session)) }
}

/// The role stored on `ssl`, if any.
///
/// # Safety
/// `ssl` must be the live SSL OpenSSL passed to a callback.
unsafe fn role<'a>(ssl: *mut SSL) -> Option<&'a PskRole> {
    let index = role_index().ok()?;
    // SAFETY: the caller guarantees `ssl` is live for the callback's duration, which
    // bounds every use of the reference.
    let ssl = unsafe { SslRef::from_ptr(ssl) };
    ssl.ex_data(index)
}

/// A TLS 1.3 session carrying `key` for `cipher`, or null.
///
/// # Safety
/// `ssl` must be a live SSL (it names the cipher table to search).
unsafe fn psk_session(ssl: *mut SSL, key: &[u8], cipher: PskHash) -> *mut SSL_SESSION {
    let code = match cipher {
        PskHash::Sha256 => TLS_AES_128_GCM_SHA256,
        PskHash::Sha384 => TLS_AES_256_GCM_SHA384,
    };
    // SAFETY: `ssl` is live; `code` is the two bytes SSL_CIPHER_find reads.
    let c = unsafe { SSL_CIPHER_find(ssl, code.as_ptr()) };
    if c.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: plain allocation; checked for null below.
    let s = unsafe { SSL_SESSION_new() };
    if s.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: `s` is the session just allocated; OpenSSL copies the key bytes (and
    // cleanses them when the session is freed).
    let ok = unsafe {
        SSL_SESSION_set1_master_key(s, key.as_ptr(), key.len()) == 1
            && SSL_SESSION_set_cipher(s, c) == 1
            && SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION) == 1
    };
    if !ok {
        // SAFETY: `s` is ours and not handed out.
        unsafe { openssl_sys::SSL_SESSION_free(s) };
        return ptr::null_mut();
    }
    s
}

/// Controller side: the host offered `identity`; answer with its PSK's session, or
/// none (the handshake then fails: there is no certificate to fall back on).
unsafe extern "C" fn find_session(
    ssl: *mut SSL,
    identity: *const c_uchar,
    identity_len: usize,
    sess: *mut *mut SSL_SESSION,
) -> c_int {
    if sess.is_null() {
        return CALLBACK_FAIL;
    }
    // SAFETY: `sess` is OpenSSL's out-parameter, checked non-null.
    unsafe { *sess = ptr::null_mut() };
    // SAFETY: OpenSSL passes the SSL being handshaken.
    let Some(PskRole::Controller(c)) = (unsafe { role(ssl) }) else {
        return CALLBACK_FAIL;
    };
    let id: &[u8] = if identity.is_null() {
        &[]
    } else {
        // SAFETY: OpenSSL passes `identity_len` readable bytes at `identity`.
        unsafe { std::slice::from_raw_parts(identity, identity_len) }
    };
    let Some(found) = c.find(id) else {
        return CALLBACK_OK;
    };
    // SAFETY: `ssl` is live.
    let s = unsafe { psk_session(ssl, &found.tls_psk, found.cipher) };
    if s.is_null() {
        return CALLBACK_FAIL;
    }
    // SAFETY: as above; OpenSSL takes the session's reference.
    unsafe { *sess = s };
    CALLBACK_OK
}

/// Host side: offer the configured identity and PSK.
unsafe extern "C" fn use_session(
    ssl: *mut SSL,
    _md: *const EVP_MD,
    id: *mut *const c_uchar,
    id_len: *mut usize,
    sess: *mut *mut SSL_SESSION,
) -> c_int {
    if sess.is_null() || id.is_null() || id_len.is_null() {
        return CALLBACK_FAIL;
    }
    // SAFETY: out-parameters checked non-null.
    unsafe { *sess = ptr::null_mut() };
    // SAFETY: OpenSSL passes the SSL being handshaken.
    let Some(PskRole::Host(h)) = (unsafe { role(ssl) }) else {
        return CALLBACK_FAIL;
    };
    // The context offers only the PSK's own cipher suite, so the handshake hash
    // (`_md`, set after a HelloRetryRequest) is always the PSK's.
    // SAFETY: `ssl` is live.
    let s = unsafe { psk_session(ssl, &h.keys.tls_psk, h.keys.cipher) };
    if s.is_null() {
        return CALLBACK_FAIL;
    }
    // SAFETY: out-parameters checked non-null; the identity bytes live in the role,
    // which the SSL owns for as long as the handshake runs.
    unsafe {
        *sess = s;
        *id = h.keys.identity.as_ptr();
        *id_len = h.keys.identity.len();
    }
    CALLBACK_OK
}
