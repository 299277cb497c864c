#pragma once
// A response after which cpp-httplib closes the connection, for a request
// refused before its body is read.
//
// cpp-httplib 0.11 keeps a connection open unless the request itself said
// "Connection: close" or HTTP/1.0 (a response header does not count), so a
// refused request's unread body would be read as more requests. Its
// keep-alive loop stops only when a response's content provider reports
// failure: the body goes out whole through a provider that then returns
// false, and the socket is closed with the request's body never read.
#include <string>

namespace httplib {
struct Response;
}

namespace pillbox::serve {

// `body` must not be empty (an empty provider is never called, and the
// connection would stay open). Only the body's own bytes are ever sent,
// whatever Range the request asked for; callers also drop the request's
// ranges (a refusal is never a 206).
void send_and_close(httplib::Response& res, int status, std::string body, const std::string& content_type);

// True when `res` carries such a body (the error handler must leave it).
bool is_closing_reply(const httplib::Response& res);

}  // namespace pillbox::serve
