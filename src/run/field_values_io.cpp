#include <cstring>
#include <stdexcept>

#include "field_values_io_impl.hpp"

namespace diffract::run {
namespace {

template <typename T>
void put(std::string& out, const T& v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void put_name(std::string& out, const std::string& name) {
    put(out, static_cast<std::uint32_t>(name.size()));
    out += name;
}

class Cursor {
public:
    explicit Cursor(const std::string& b) : bytes_(b) {}
    bool done() const { return pos_ == bytes_.size(); }
    template <typename T>
    T get() {
        need(sizeof(T));
        T v;
        std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }
    std::string name() {
        const auto n = get<std::uint32_t>();
        need(n);
        std::string s = bytes_.substr(pos_, n);
        pos_ += n;
        return s;
    }

private:
    // The bytes come from our own ranks; a short read is an internal error, not an input error.
    void need(std::size_t n) const {
        if (bytes_.size() - pos_ < n) throw std::runtime_error("truncated result message from an MPI rank");
    }
    const std::string& bytes_;
    std::size_t pos_ = 0;
};

}  // namespace

std::string serialize_field_values(std::size_t index, const FieldValues& values) {
    std::string out;
    put(out, static_cast<std::uint64_t>(index));
    put(out, static_cast<std::uint32_t>(values.scalars.size()));
    for (const auto& [name, v] : values.scalars) put_name(out, name), put(out, v);
    put(out, static_cast<std::uint32_t>(values.vectors.size()));
    for (const auto& [name, v] : values.vectors) {
        put_name(out, name);
        put(out, static_cast<std::uint64_t>(v.size()));
        out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
    }
    std::vector<std::pair<const char*, double>> book;
    for_each_stored(values.bookkeeping, [&book](const char* name, double v) { book.emplace_back(name, v); });
    put(out, static_cast<std::uint32_t>(book.size()));
    for (const auto& [name, v] : book) put_name(out, name), put(out, v);
    return out;
}

std::vector<std::pair<std::size_t, FieldValues>> parse_field_values(const std::string& bytes) {
    std::vector<std::pair<std::size_t, FieldValues>> out;
    Cursor c(bytes);
    while (!c.done()) {
        const auto index = static_cast<std::size_t>(c.get<std::uint64_t>());
        FieldValues v;
        for (auto n = c.get<std::uint32_t>(); n > 0; --n) {
            auto name = c.name();
            v.scalars[name] = c.get<double>();
        }
        for (auto n = c.get<std::uint32_t>(); n > 0; --n) {
            auto name = c.name();
            std::vector<double> x(static_cast<std::size_t>(c.get<std::uint64_t>()));
            for (auto& d : x) d = c.get<double>();
            v.vectors[name] = std::move(x);
        }
        for (auto n = c.get<std::uint32_t>(); n > 0; --n) {
            const auto name = c.name();
            if (!read_stored(v.bookkeeping, name, c.get<double>()))
                throw std::runtime_error("a result message from an MPI rank names no bookkeeping: " + name);
        }
        out.emplace_back(index, std::move(v));
    }
    return out;
}

}  // namespace diffract::run
