"""Kubernetes ``Status`` error bodies, shaped like k8s.io/apimachinery/pkg/api/errors."""

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """An error the API answers with a ``kind: Status`` body."""

    def __init__(self, code, message, reason=None, details=None, retry_after=None):
        Exception.__init__(self, message)
        self.code = int(code)
        self.message = message
        self.reason = reason if reason is not None else REASONS.get(self.code, "")
        self.details = details
        self.retry_after = retry_after

    def status(self):
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        details = dict(self.details or {})
        if self.retry_after:
            details["retryAfterSeconds"] = int(self.retry_after)
        if details:
            body["details"] = details
        body["code"] = self.code
        return body


def qualified(rtype):
    """``pods`` for the core group, ``daemonsets.apps`` for others (errors name resources so)."""
    return rtype.plural if not rtype.group else "%s.%s" % (rtype.plural, rtype.group)


def _details(rtype, name):
    details = {"name": name, "kind": rtype.plural}
    if rtype.group:
        details["group"] = rtype.group
    return details


def not_found(rtype, name):
    return ApiError(404, '%s "%s" not found' % (qualified(rtype), name),
                    details=_details(rtype, name))


def already_exists(rtype, name):
    return ApiError(409, '%s "%s" already exists' % (qualified(rtype), name), reason="AlreadyExists",
                    details=_details(rtype, name))


def conflict(rtype, name, why):
    return ApiError(409, 'Operation cannot be fulfilled on %s "%s": %s' % (qualified(rtype), name, why),
                    reason="Conflict", details=_details(rtype, name))


def bad_request(message):
    return ApiError(400, message, reason="BadRequest")


def invalid(rtype, kind, name, causes):
    """422 Invalid with field causes: ``causes`` is a list of (field, message)."""
    text = "; ".join("%s: %s" % (f, m) for f, m in causes)
    details = {"name": name, "group": rtype.group, "kind": kind,
               "causes": [{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes]}
    if not rtype.group:
        del details["group"]
    return ApiError(422, '%s "%s" is invalid: %s' % (kind, name, text), reason="Invalid", details=details)


def method_not_allowed():
    return ApiError(405, "the server does not allow this method on the requested resource",
                    reason="MethodNotAllowed")


def unsupported_media_type(content_type):
    return ApiError(415, "the body of the request was in an unknown format - accepted media types include: "
                    "application/json-patch+json, application/merge-patch+json, "
                    "application/strategic-merge-patch+json (got %s)" % content_type,
                    reason="UnsupportedMediaType")


def unauthorized():
    return ApiError(401, "Unauthorized", reason="Unauthorized")


def not_found_path():
    return ApiError(404, "the server could not find the requested resource", reason="NotFound",
                    details={"causes": [{"reason": "UnexpectedServerResponse", "message": "404 page not found"}]})


def gone(message):
    return ApiError(410, message, reason="Expired")
