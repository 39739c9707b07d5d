'use strict';
// 5. Rejected client tokens (expired, forged, wrong audience) make start() fail
//    with 401; REST auth; `switchyard token --claim`.

const { describe, it, after } = require('node:test');
const assert = require('node:assert/strict');
const { VALID, connect, closeAll, uniqueHub, waitFor } = require('../lib/client');
const { signJwt, decodeJwt } = require('../lib/rest');

const OTHER_KEY = 'ZYXWVUTSRQPONMLKJIHGFEDCBA9876543210ZYXWVUTS';

async function expect401(handle, what) {
  await assert.rejects(waitFor(handle.connection.start(), 10000, `start() with ${what}`), (err) => {
    assert.match(String(err && err.message), /401/, `start() with ${what} should fail with 401, got: ${err && err.message}`);
    return true;
  });
}

module.exports = (env) => {
  describe('5. token validation', () => {
    after(closeAll);

    const now = () => Math.floor(Date.now() / 1000);

    for (const combo of VALID) {
      describe(combo.name, () => {
        it('a JS-signed valid token is accepted (control)', async () => {
          const hub = uniqueHub('auth_ok');
          const { url } = await env.service.token({ hub });
          const token = signJwt(env.service.accessKey, { aud: url, 'asrs.s.uid': 'js' });
          const c = await connect(env.service, { hub, url, token, ...combo });
          await env.rest.sendToUser(hub, 'js', 'msg', ['signed in js']);
          assert.deepEqual(await c.inbox.next('msg'), ['signed in js']);
        });

        it('an expired token is rejected with 401', async () => {
          const hub = uniqueHub('auth_expired');
          const { url } = await env.service.token({ hub });
          const token = signJwt(env.service.accessKey, { aud: url }, { now: now() - 7200, lifetimeSeconds: 3600 });
          await expect401(await connect(env.service, { hub, url, token, ...combo, start: false }), 'an expired token');
        });

        it('a token signed with another key is rejected with 401', async () => {
          const hub = uniqueHub('auth_forged');
          const { url } = await env.service.token({ hub });
          const token = signJwt(OTHER_KEY, { aud: url });
          await expect401(await connect(env.service, { hub, url, token, ...combo, start: false }), 'a forged token');
        });

        it('a token for another hub is rejected with 401', async () => {
          const hub = uniqueHub('auth_aud');
          const { url } = await env.service.token({ hub });
          const { accessToken } = await env.service.token({ hub: uniqueHub('auth_other') });
          await expect401(
            await connect(env.service, { hub, url, token: accessToken, ...combo, start: false }),
            'a token for another hub',
          );
        });
      });
    }

    it('skipNegotiation WebSocket with a forged token fails to start', async () => {
      const hub = uniqueHub('auth_skip');
      const { url } = await env.service.token({ hub });
      const token = signJwt(OTHER_KEY, { aud: url });
      const c = await connect(env.service, { hub, url, token, transport: 'WebSockets', skipNegotiation: true, start: false });
      await assert.rejects(waitFor(c.connection.start(), 10000, 'start()'));
    });

    it('id-less WebSocket upgrade with a forged token is answered 401 (raw ws)', async () => {
      // The client's error text does not carry the status; check it with `ws` directly.
      const WebSocket = require('ws');
      const hub = uniqueHub('auth_ws_raw');
      const { url } = await env.service.token({ hub });
      const statusOf = (token) =>
        waitFor(
          new Promise((resolve, reject) => {
            const ws = new WebSocket(url.replace(/^http/, 'ws'), { headers: { Authorization: `Bearer ${token}` } });
            ws.on('unexpected-response', (_req, res) => {
              resolve(res.statusCode);
              res.resume();
              ws.terminate();
            });
            ws.on('open', () => {
              resolve(101);
              ws.terminate();
            });
            ws.on('error', (e) => reject(e));
          }),
          5000,
          'the WebSocket upgrade answer',
        );
      assert.equal(await statusOf(signJwt(OTHER_KEY, { aud: url })), 401);
      assert.equal(await statusOf(signJwt(env.service.accessKey, { aud: url }, { now: now() - 7200, lifetimeSeconds: 3600 })), 401);
      assert.equal(await statusOf(signJwt(env.service.accessKey, { aud: url })), 101, 'control: a valid token upgrades');
    });

    describe('switchyard token --claim', () => {
      it('puts the claim into the token, and the service accepts it', async () => {
        const hub = uniqueHub('claim');
        const minted = await env.service.token({ hub, user: 'u', claims: ['team=blue', 'role=admin'] });
        const { payload } = decodeJwt(minted.accessToken);
        assert.equal(payload.team, 'blue');
        assert.equal(payload.role, 'admin');
        assert.equal(payload['asrs.s.uid'], 'u');
        assert.equal(payload.aud, minted.url);
        assert.ok(payload.exp - now() > 3500 && payload.exp - now() <= 3600, `exp is ~1h ahead: ${payload.exp}`);
        const c = await connect(env.service, { hub, url: minted.url, token: minted.accessToken });
        await env.rest.sendToUser(hub, 'u', 'msg', ['claims ok']);
        assert.deepEqual(await c.inbox.next('msg'), ['claims ok']);
      });

      it('--claim nameid=carol (no --user) makes carol the user id', async () => {
        const hub = uniqueHub('claim_nameid');
        const c = await connect(env.service, { hub, claims: ['nameid=carol'] });
        await env.rest.sendToUser(hub, 'carol', 'msg', ['to carol']);
        assert.deepEqual(await c.inbox.next('msg'), ['to carol']);
      });

      it('--claim asrs.s.uid=dave makes dave the user id', async () => {
        const hub = uniqueHub('claim_uid');
        const c = await connect(env.service, { hub, claims: ['asrs.s.uid=dave'] });
        await env.rest.sendToUser(hub, 'dave', 'msg', ['to dave']);
        assert.deepEqual(await c.inbox.next('msg'), ['to dave']);
      });
    });

    describe('REST authentication', () => {
      const body = { target: 'msg', arguments: ['x'] };
      const q = 'api-version=2022-06-01';
      const sendPath = (hub) => `/api/hubs/${hub}/:send`;

      it('no Authorization header -> 401', async () => {
        const hub = uniqueHub('rest_none');
        const res = await env.rest.call('POST', sendPath(hub), { query: q, body, token: '' });
        assert.equal(res.status, 401, res.text);
      });

      it('token signed with another key -> 401', async () => {
        const hub = uniqueHub('rest_forged');
        const aud = `${env.service.baseUrl}${sendPath(hub)}`;
        const res = await env.rest.call('POST', sendPath(hub), { query: q, body, token: signJwt(OTHER_KEY, { aud }) });
        assert.equal(res.status, 401, res.text);
      });

      it('expired token -> 401', async () => {
        const hub = uniqueHub('rest_expired');
        const aud = `${env.service.baseUrl}${sendPath(hub)}`;
        const token = signJwt(env.service.accessKey, { aud }, { now: now() - 7200, lifetimeSeconds: 3600 });
        const res = await env.rest.call('POST', sendPath(hub), { query: q, body, token });
        assert.equal(res.status, 401, res.text);
      });

      it('token whose aud names another hub -> 401', async () => {
        const hub = uniqueHub('rest_aud');
        const aud = `${env.service.baseUrl}${sendPath(uniqueHub('rest_other'))}`;
        const res = await env.rest.call('POST', sendPath(hub), { query: q, body, aud });
        assert.equal(res.status, 401, res.text);
      });

      it('Management-SDK style aud (no port, ?api-version in aud) -> 202', async () => {
        const hub = uniqueHub('rest_sdk');
        const c = await connect(env.service, { hub });
        const aud = `http://127.0.0.1${sendPath(hub.toLowerCase())}?${q}`;
        const res = await env.rest.call('POST', sendPath(hub), { query: q, body: { Target: 'msg', Arguments: ['sdk'] }, aud });
        assert.equal(res.status, 202, res.text);
        assert.deepEqual(await c.inbox.next('msg'), ['sdk']);
      });
    });
  });
};
