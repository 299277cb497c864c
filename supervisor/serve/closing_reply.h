#pragma once
// A response after which cpp-httplib closes the connection, for a request
// refused before its body is read.
//
// cpp-httplib 0.11 (Debian's libcpp-httplib0.11) keeps a connection open
// after any response unless the request itself said "Connection: close" or
// HTTP/1.0 (Server::process_request sets connection_closed from the request
// alone; a response header does not). A refused request's unread body would
// then be read as more requests. The one way a handler ends the connection:
// process_server_socket's keep-alive loop stops when process_request returns
// false, which write_response_core does when the response's content
// provider reports failure (write_content: the provider returned false).
// So the body goes out whole through a provider that then returns false;
// the client gets the whole answer (Content-Length, "Connection: close")
// and the socket is shut down and closed, the body never read.
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
