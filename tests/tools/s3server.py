"""s3server.py: moto's S3 in server mode, checking SigV4, for stoker's tests.

  VENV/bin/python s3server.py --fd N --creds FILE [--public]

Started by `tests/tools/serve s3` with the Python of a virtual environment
that has moto[server] (5.2.5); not a tool to run by hand. It serves on the
listening socket N that serve bound on 127.0.0.1 (so no port race), after
writing FILE (mode 0600, renamed into place) with two lines:

  ACCESS_KEY SECRET                   an IAM user's long-term key
  ACCESS_KEY SECRET SESSION_TOKEN     temporary credentials of an assumed role

Both may do anything in S3 (an inline policy allowing s3:*). moto checks
requests only once INITIAL_NO_AUTH_ACTION_COUNT actions have gone by
unchecked; the keys are made in its IAM and STS backends first, then that
count is set to 0, so every request afterwards has its signature checked
(SignatureDoesNotMatch, InvalidAccessKeyId, InvalidToken) against them.

What moto does not do and this file does (in front of moto, as WSGI
middleware, or by wrapping one moto method, each said where):
- an unsigned request gets 403 AccessDenied, as a private bucket on AWS
  would (moto would fail with a 500), unless --public;
- with --public an unsigned request is anonymous and allowed;
- moto's own control API (/moto-api/..., which could turn the checks off)
  and the instance-metadata paths are not served: 404;
- a presigned URL gets 403: moto does not verify one under IAM checks.
"""
import argparse
import json
import os
import sys

from moto import settings
from moto.core import DEFAULT_ACCOUNT_ID
from moto.core.authorization import ActionAuthenticatorMixin
from moto.iam.models import iam_backends
from moto.moto_server.werkzeug_app import (DomainDispatcherApplication, MotoRequestHandler,
                                           create_backend_app)
from moto.sts.models import sts_backends
from werkzeug.serving import make_server

REGION = "us-east-1"
ALLOW_S3 = json.dumps({"Version": "2012-10-17",
                       "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]})
TRUST = json.dumps({"Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                   "Principal": {"AWS": "arn:aws:iam::%s:root" % DEFAULT_ACCOUNT_ID}}]})


def make_credentials():
    """An IAM user with a key, and a role's session, both allowed s3:*."""
    iam = iam_backends[DEFAULT_ACCOUNT_ID]["aws"]
    iam.create_user(REGION, "stoker-test")
    iam.put_user_policy("stoker-test", "s3-all", ALLOW_S3)
    key = iam.create_access_key("stoker-test")
    role = iam.create_role("stoker-test-role", TRUST, "/", None, "", [], None)
    iam.put_role_policy("stoker-test-role", "s3-all", ALLOW_S3)
    sess = sts_backends[DEFAULT_ACCOUNT_ID]["aws"].assume_role(
        region_name=REGION, role_session_name="stoker-test", role_arn=role.arn, policy=None,
        duration=12 * 3600, external_id=None)
    return ["%s %s" % (key.access_key_id, key.secret_access_key),
            "%s %s %s" % (sess.access_key_id, sess.secret_access_key, sess.session_token)]


def write_creds(path, lines):
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.rename(tmp, path)


def allow_anonymous():
    """--public: moto's check reads the Authorization header unconditionally
    (a KeyError, so a 500, without one); an unsigned request is anonymous
    here and allowed. Signed requests are still checked."""
    check = ActionAuthenticatorMixin._authenticate_and_authorize_action

    def checked_if_signed(self, iam_request_cls, resource="*"):
        if "Authorization" not in self.headers:
            return None
        return check(self, iam_request_cls, resource)
    ActionAuthenticatorMixin._authenticate_and_authorize_action = checked_if_signed


def error(start_response, status, code, message):
    body = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message>'
            '</Error>' % (code, message)).encode()
    start_response(status, [("Content-Type", "application/xml"),
                            ("Content-Length", str(len(body)))])
    return [body]


def gate(app, public):
    """The WSGI middleware in front of moto (see the file's comment)."""
    def wrapped(environ, start_response):
        path, query = environ.get("PATH_INFO", ""), environ.get("QUERY_STRING", "")
        if path.startswith(("/moto-api", "/latest/")) or path == "/favicon.ico":
            return error(start_response, "404 Not Found", "NoSuchBucket", "not served here")
        if "X-Amz-Algorithm=" in query or "Signature=" in query:
            return error(start_response, "403 Forbidden", "AccessDenied",
                         "presigned URLs are not verified by this test server")
        auth = environ.get("HTTP_AUTHORIZATION")
        if auth is not None and not auth.startswith("AWS4-HMAC-SHA256 Credential="):
            return error(start_response, "403 Forbidden", "AccessDenied",
                         "only SigV4 (AWS4-HMAC-SHA256) signatures are accepted")
        if auth is None and not public and environ.get("REQUEST_METHOD") != "OPTIONS":
            return error(start_response, "403 Forbidden", "AccessDenied",
                         "Access Denied (unsigned request)")
        return app(environ, start_response)
    return wrapped


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fd", type=int, required=True, help="a listening TCP socket to serve on")
    p.add_argument("--creds", required=True, help="file to write the credentials into")
    p.add_argument("--public", action="store_true", help="let unsigned requests through")
    a = p.parse_args()

    creds = make_credentials()  # unchecked: INITIAL_NO_AUTH_ACTION_COUNT is still infinite
    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
    ActionAuthenticatorMixin.request_count = 0
    if a.public:
        allow_anonymous()
    app = gate(DomainDispatcherApplication(create_backend_app), a.public)
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler,
                         fd=a.fd)
    write_creds(a.creds, creds)
    sys.stderr.write("s3server.py: moto S3 on %s:%d%s\n" %
                     (server.server_address[0], server.server_address[1],
                      " (public)" if a.public else ""))
    sys.stderr.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
