'use strict';
// S3-compatible server for stoker's tests: @20minutes/s3rver (a maintained
// fork of s3rver that verifies SigV4 signatures; s3rver 3.7.1 accepts any
// V4 signature) on loopback, storing objects under a directory.
//
//   node server.js --dir DATA [--fd N | --port P] [--bucket NAME]... [--public]
//
// Credentials: access key S3RVER, secret S3RVER (s3rver's built-in account).
// Requests without a signature get 403 AccessDenied, as a private bucket on
// AWS would, unless --public. Prints "http://127.0.0.1:PORT" once listening.
const crypto = require('crypto');

// s3rver makes ListObjectsV2 continuation tokens with single DES, which
// OpenSSL 3 keeps in its legacy provider (ERR_OSSL_EVP_UNSUPPORTED, a 500 on
// any truncated listing). Triple DES with the key repeated thrice is the same
// cipher and is in the default provider.
for (const name of ['createCipheriv', 'createDecipheriv']) {
  const orig = crypto[name];
  crypto[name] = function (algo, key, iv, ...rest) {
    if (String(algo).toLowerCase() === 'des' && key.length === 8) {
      return orig.call(this, 'des-ede3-cbc', Buffer.concat([key, key, key]), iv, ...rest);
    }
    return orig.call(this, algo, key, iv, ...rest);
  };
}

// s3rver escapes XML text with he.escape and then hands it to fast-xml-parser's
// builder, which escapes it again ("a&b" listed as "a&amp;amp;b"). Leave the
// one escaping to the builder, as S3 would have it.
const path = require('path');
const heModule = require.resolve('he', { paths: [path.dirname(require.resolve('@20minutes/s3rver'))] });
require(heModule).escape = (s) => String(s);

const S3rver = require('@20minutes/s3rver');

function usage(msg) {
  process.stderr.write(`server.js: ${msg}\n` +
    'usage: node server.js --dir DATA [--fd N | --port P] [--bucket NAME]... [--public]\n');
  process.exit(2);
}

const opts = { dir: null, fd: null, port: 0, buckets: [], public: false };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  const val = () => {
    if (i + 1 >= argv.length) usage(`${a} needs a value`);
    return argv[++i];
  };
  if (a === '--dir') opts.dir = val();
  else if (a === '--fd') opts.fd = Number(val());
  else if (a === '--port') opts.port = Number(val());
  else if (a === '--bucket') opts.buckets.push(val());
  else if (a === '--public') opts.public = true;
  else usage(`unknown argument ${a}`);
}
if (!opts.dir) usage('--dir is required');

const server = new S3rver({
  address: '127.0.0.1',
  port: opts.port,
  directory: opts.dir,
  silent: true,
  vhostBuckets: false,
  configureBuckets: opts.buckets.map((name) => ({ name })),
});

// First in the chain: one access-log line per request (s3rver's own request
// log is garbled, so it runs silent), and, unless --public, 403 for requests
// with neither an Authorization header nor a presigned query.
server.middleware.unshift(async (ctx, next) => {
  const t0 = Date.now();
  const line = (status) => process.stdout.write(
    `${new Date(t0).toISOString()} ${ctx.method} ${ctx.url} ${status} ${Date.now() - t0}ms\n`);
  const q = ctx.query;
  if (!opts.public && ctx.method !== 'OPTIONS' && !('authorization' in ctx.headers) &&
      !('X-Amz-Algorithm' in q) && !('Signature' in q)) {
    ctx.status = 403;
    ctx.type = 'application/xml';
    ctx.body = '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>' +
      '<Message>Access Denied (unsigned request)</Message></Error>';
    line('403 AccessDenied');
    return;
  }
  try {
    await next();
    line(ctx.status);
  } catch (err) {
    line(`${err.status || 500} ${err.code || err.message}`);
    throw err;
  }
});

(async () => {
  await server.configureBuckets();
  const listenArg = opts.fd !== null ? { fd: opts.fd } : { port: opts.port, host: '127.0.0.1' };
  server.httpServer = await server.listen(listenArg);
  // Large objects on a slow test machine: no request or keep-alive cut-offs.
  server.httpServer.requestTimeout = 0;
  server.httpServer.keepAliveTimeout = 60000;
  server.httpServer.headersTimeout = 60000;
  const { port } = server.httpServer.address();
  process.stdout.write(`http://127.0.0.1:${port}\n`);
})().catch((err) => {
  process.stderr.write(`server.js: ${err.stack || err}\n`);
  process.exit(1);
});

for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => process.exit(0));
}
