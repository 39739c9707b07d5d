'use strict';
// HS256 JWTs signed with node:crypto, and a small client for the data-plane REST API.

const crypto = require('node:crypto');

function b64url(input) {
  return Buffer.from(input).toString('base64url');
}

/**
 * Sign an HS256 JWT. The HMAC key is the UTF-8 bytes of the access key string.
 * `claims` are written as given; `exp`, `nbf`, `iat` default around now.
 */
function signJwt(key, claims, { lifetimeSeconds = 3600, now = Math.floor(Date.now() / 1000), omit = [] } = {}) {
  const header = { alg: 'HS256', typ: 'JWT' };
  const payload = { nbf: now, exp: now + lifetimeSeconds, iat: now, ...claims };
  for (const k of omit) delete payload[k];
  const signingInput = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(payload))}`;
  const signature = crypto.createHmac('sha256', Buffer.from(key, 'utf8')).update(signingInput).digest('base64url');
  return `${signingInput}.${signature}`;
}

function decodeJwt(token) {
  const [h, p] = token.split('.');
  return {
    header: JSON.parse(Buffer.from(h, 'base64url').toString('utf8')),
    payload: JSON.parse(Buffer.from(p, 'base64url').toString('utf8')),
  };
}

const API = 'api-version=2022-06-01';
const enc = encodeURIComponent;

class Rest {
  /** @param {{baseUrl: string, accessKey: string}} service */
  constructor(service) {
    this.baseUrl = service.baseUrl;
    this.accessKey = service.accessKey;
  }

  /**
   * Make a REST call. `path` starts with /api/…; `query` is appended as is.
   * The token's `aud` is the request URL without the query (the documented form),
   * unless `aud` is given.
   */
  async call(method, path, { query = '', body, aud, token, headers = {} } = {}) {
    const url = `${this.baseUrl}${path}${query ? `?${query}` : ''}`;
    const bearer = token !== undefined ? token : signJwt(this.accessKey, { aud: aud !== undefined ? aud : `${this.baseUrl}${path}` });
    const init = { method, headers: { ...headers } };
    if (bearer) init.headers.Authorization = `Bearer ${bearer}`;
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = typeof body === 'string' ? body : JSON.stringify(body);
    }
    const res = await fetch(url, { ...init, signal: AbortSignal.timeout(10000) });
    const text = await res.text();
    return { status: res.status, text, headers: res.headers, url, method };
  }

  /** Like call(), but throws unless the status is one of `expected`. */
  async expect(expected, method, path, opts) {
    const res = await this.call(method, path, opts);
    const ok = Array.isArray(expected) ? expected.includes(res.status) : res.status === expected;
    if (!ok) {
      throw new Error(`${method} ${res.url} -> ${res.status} (expected ${expected}); body: ${res.text}`);
    }
    return res;
  }

  // --- 2022-06-01 ---------------------------------------------------------
  broadcast(hub, target, args, { excluded = [] } = {}) {
    const q = [API, ...excluded.map((id) => `excluded=${enc(id)}`)].join('&');
    return this.expect(202, 'POST', `/api/hubs/${enc(hub)}/:send`, { query: q, body: { target, arguments: args } });
  }
  sendToUser(hub, user, target, args) {
    return this.expect(202, 'POST', `/api/hubs/${enc(hub)}/users/${enc(user)}/:send`, { query: API, body: { target, arguments: args } });
  }
  sendToConnection(hub, id, target, args) {
    return this.expect(202, 'POST', `/api/hubs/${enc(hub)}/connections/${enc(id)}/:send`, { query: API, body: { target, arguments: args } });
  }
  sendToGroup(hub, group, target, args, { excluded = [] } = {}) {
    const q = [API, ...excluded.map((id) => `excluded=${enc(id)}`)].join('&');
    return this.expect(202, 'POST', `/api/hubs/${enc(hub)}/groups/${enc(group)}/:send`, { query: q, body: { target, arguments: args } });
  }
  addConnectionToGroup(hub, group, id) {
    return this.expect(200, 'PUT', `/api/hubs/${enc(hub)}/groups/${enc(group)}/connections/${enc(id)}`, { query: API });
  }
  removeConnectionFromGroup(hub, group, id) {
    return this.expect(200, 'DELETE', `/api/hubs/${enc(hub)}/groups/${enc(group)}/connections/${enc(id)}`, { query: API });
  }
  addUserToGroup(hub, user, group) {
    return this.expect(200, 'PUT', `/api/hubs/${enc(hub)}/users/${enc(user)}/groups/${enc(group)}`, { query: API });
  }
  removeUserFromGroup(hub, user, group) {
    return this.expect(204, 'DELETE', `/api/hubs/${enc(hub)}/users/${enc(user)}/groups/${enc(group)}`, { query: API });
  }
  closeConnection(hub, id, reason) {
    const q = [API, ...(reason !== undefined ? [`reason=${enc(reason)}`] : [])].join('&');
    return this.expect(200, 'DELETE', `/api/hubs/${enc(hub)}/connections/${enc(id)}`, { query: q });
  }

  // --- v1 ------------------------------------------------------------------
  v1Broadcast(hub, target, args) {
    return this.expect(202, 'POST', `/api/v1/hubs/${enc(hub)}`, { body: { target, arguments: args } });
  }
}

module.exports = { signJwt, decodeJwt, Rest, API };
