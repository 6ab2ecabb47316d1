// A real OpenID Connect provider for the OAuth tests: `oidc-provider` (a
// certified implementation, from npm) on 127.0.0.1 at a free port, with its
// development interactions (any login, then a consent page) driven by the
// tests' browser.
//
// Started by tests/common/oidc.rs. Configuration from OIDC_CONFIG (JSON):
//   access_token_ttl   seconds an access token lives (default 3600)
//   scopes             extra scopes it grants (e.g. ["mail.read"]), served as
//                      the scopes of one resource server, so they are granted
//                      and honoured on refresh like any API's
// Test-only endpoints, beside the provider's own:
//   POST /test/clients   {client_id, client_secret, redirect_uris}: registers
//                        a client (the gateway's callback is known only after
//                        it started)
//   GET  /test/stats     requests that reached the token endpoint by
//                        grant_type, and the revocation endpoint
//   POST /test/invalidate-refresh-tokens   every refresh token issued so far
//                        answers invalid_grant from now on
// Prints `oidc-provider listening on http://127.0.0.1:PORT` once ready.

import { createRequire } from 'node:module';
import * as http from 'node:http';
import * as path from 'node:path';

const dir = process.env.OIDC_PROVIDER_DIR;
if (!dir) {
  console.error('OIDC_PROVIDER_DIR must name the directory oidc-provider is installed in');
  process.exit(2);
}
const require = createRequire(path.join(dir, 'package.json'));
const { default: Provider } = await import(require.resolve('oidc-provider'));

const settings = JSON.parse(process.env.OIDC_CONFIG || '{}');
const accessTtl = settings.access_token_ttl ?? 3600;
const extraScopes = settings.scopes ?? [];
const RESOURCE = 'urn:otc-test:api';

// Every model in one map; clients registered at run time live here too.
const store = new Map();
const stats = { token_requests: { authorization_code: 0, refresh_token: 0 }, revocations: 0 };

class MemoryAdapter {
  constructor(model) { this.model = model; }
  key(id) { return `${this.model}:${id}`; }
  async upsert(id, payload, expiresIn) {
    const expires = expiresIn ? Date.now() + expiresIn * 1000 : Infinity;
    store.set(this.key(id), { payload, expires });
  }
  async find(id) {
    const entry = store.get(this.key(id));
    if (!entry || entry.expires <= Date.now()) return undefined;
    return entry.payload;
  }
  async findByUid(uid) {
    for (const [key, entry] of store) {
      if (key.startsWith(`${this.model}:`) && entry.payload.uid === uid) return entry.payload;
    }
    return undefined;
  }
  async findByUserCode(userCode) {
    for (const [key, entry] of store) {
      if (key.startsWith(`${this.model}:`) && entry.payload.userCode === userCode) return entry.payload;
    }
    return undefined;
  }
  async consume(id) {
    const entry = store.get(this.key(id));
    if (entry) entry.payload.consumed = Math.floor(Date.now() / 1000);
  }
  async destroy(id) { store.delete(this.key(id)); }
  async revokeByGrantId(grantId) {
    for (const [key, entry] of store) {
      if (entry.payload.grantId === grantId) store.delete(key);
    }
  }
}

const server = http.createServer();
await new Promise((resolve) => { server.listen(0, '127.0.0.1', resolve); });
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  adapter: MemoryAdapter,
  clients: [],
  scopes: ['openid', 'offline_access', 'email', ...extraScopes],
  claims: { openid: ['sub'], email: ['email', 'email_verified'] },
  features: {
    devInteractions: { enabled: true },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      // Every token is for the one API, so its scopes are granted without a
      // `resource` parameter, and kept on refresh.
      defaultResource: () => RESOURCE,
      useGrantedResource: () => true,
      getResourceServerInfo: () => ({
        scope: extraScopes.join(' '),
        accessTokenFormat: 'opaque',
        accessTokenTTL: accessTtl,
      }),
    },
  },
  // A refresh token for every code grant of a client allowed to refresh.
  issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
  rotateRefreshToken: () => settings.rotate_refresh_tokens === true,
  ttl: {
    AccessToken: accessTtl,
    AuthorizationCode: 60,
    IdToken: 3600,
    Interaction: 3600,
    Session: 86400,
    Grant: 86400,
    RefreshToken: 86400,
  },
  // Any login name is an account whose `sub` is that name, and whose email
  // (with the `email` scope) is that name at example.test.
  findAccount: async (_ctx, id) => ({
    accountId: id,
    claims: async () => ({ sub: id, email: `${id}@example.test`, email_verified: true }),
  }),
  pkce: { required: () => true },
  cookies: { keys: ['oidc-test-cookie-key'] },
});

provider.on('server_error', (_ctx, error) => { console.error('server_error', error); });

// The test endpoints first; the counters after the provider answered.
provider.use(async (ctx, next) => {
  if (ctx.path === '/test/clients' && ctx.method === 'POST') {
    const body = await new Promise((resolve, reject) => {
      let text = '';
      ctx.req.on('data', (chunk) => { text += chunk; });
      ctx.req.on('end', () => resolve(text));
      ctx.req.on('error', reject);
    });
    const client = JSON.parse(body);
    store.set(`Client:${client.client_id}`, {
      payload: {
        client_id: client.client_id,
        client_secret: client.client_secret,
        redirect_uris: client.redirect_uris,
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        token_endpoint_auth_method: client.token_endpoint_auth_method ?? 'client_secret_basic',
      },
      expires: Infinity,
    });
    ctx.status = 201;
    ctx.body = { registered: client.client_id };
    return;
  }
  if (ctx.path === '/test/stats' && ctx.method === 'GET') {
    ctx.body = stats;
    return;
  }
  if (ctx.path === '/test/invalidate-refresh-tokens' && ctx.method === 'POST') {
    for (const key of [...store.keys()]) {
      if (key.startsWith('RefreshToken:')) store.delete(key);
    }
    ctx.status = 204;
    return;
  }
  await next();
  if (ctx.path === '/token' && ctx.method === 'POST') {
    const grantType = ctx.oidc?.params?.grant_type;
    if (grantType in stats.token_requests) stats.token_requests[grantType] += 1;
  }
  if (ctx.path === '/token/revocation' && ctx.method === 'POST') stats.revocations += 1;
});

server.on('request', provider.callback());
console.log(`oidc-provider listening on ${issuer}`);
