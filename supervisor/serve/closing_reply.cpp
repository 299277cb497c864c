#include "supervisor/serve/closing_reply.h"

#include <httplib.h>

#include <algorithm>
#include <memory>

namespace pillbox::serve {

void send_and_close(httplib::Response& res, int status, std::string body, const std::string& content_type) {
  res.status = status;
  res.set_header("Connection", "close");
  auto bytes = std::make_shared<const std::string>(std::move(body));
  res.set_content_provider(bytes->size(), content_type,
                           [bytes](std::size_t offset, std::size_t length, httplib::DataSink& sink) {
                             // cpp-httplib 0.11 passes a Range header's offset and length
                             // unchecked: never past the body's end (that would send the heap).
                             if (offset < bytes->size()) {
                               sink.write(bytes->data() + offset, std::min(length, bytes->size() - offset));
                             }
                             return false;  // all of it written; "failed", so the connection ends
                           });
}

bool is_closing_reply(const httplib::Response& res) {
  return static_cast<bool>(res.content_provider_) && res.get_header_value("Connection") == "close";
}

}  // namespace pillbox::serve
