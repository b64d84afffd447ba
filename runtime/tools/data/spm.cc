// SentencePiece behind the C interface of spm.h. The only C++ file of the
// project: meson compiles it with the cpp language (runtime/tools/data).
#include "spm.h"
#include "bpe.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

// A tokenizer.json (byte-level BPE, bpe.h) goes behind the same interface:
// whale-data and whale-generate take either through --tokenizer.
struct wd_spm {
    sentencepiece::SentencePieceProcessor sp;
    int nl = -1;
    wd_bpe *bpe = nullptr;
    int bos = -1, eos = -1;
    ~wd_spm() { wd_bpe_free(bpe); }
};

namespace {

void set_err(char *err, size_t n, const std::string &what)
{
    if (err && n)
        std::snprintf(err, n, "%s", what.c_str());
}

// Pulls sentences from the C callback.
class CbIterator : public sentencepiece::SentenceIterator {
  public:
    CbIterator(wd_spm_next_fn fn, void *user) : fn_(fn), user_(user) { Next(); }
    bool done() const override { return done_; }
    void Next() override
    {
        const char *s = nullptr;
        size_t len = 0;
        if (fn_(user_, &s, &len)) {
            done_ = true;
            return;
        }
        cur_.assign(s, len);
    }
    const std::string &value() const override { return cur_; }
    sentencepiece::util::Status status() const override { return {}; }

  private:
    wd_spm_next_fn fn_;
    void *user_;
    std::string cur_;
    bool done_ = false;
};

int finish_load(wd_spm *s, wd_spm **out)
{
    int id = s->sp.PieceToId("<n>");
    if (id < 0 || s->sp.IsUnknown(id)) {
        id = s->sp.PieceToId("<0x0A>");
        if (id < 0 || s->sp.IsUnknown(id))
            id = -1;
        // A model whose normalizer keeps "\n" (Llama 2 and Mistral: identity
        // rules, byte fallback) encodes it itself: whole documents go to it,
        // as sentencepiece and Hugging Face's tokenizer do. Encoding line by
        // line would put the dummy-prefix piece at every line start.
        std::vector<int> v;
        if (id >= 0 && s->sp.Encode("a\nb", &v).ok())
            for (int x : v)
                if (x == id)
                    id = -1;
    }
    s->nl = id;
    *out = s;
    return 0;
}

} // namespace

extern "C" int wd_spm_train(const struct wd_spm_train_opts *o, char **model, size_t *model_len,
                            char *err, size_t errlen)
{
    *model = nullptr;
    *model_len = 0;
    std::unordered_map<std::string, std::string> kw = {
        {"model_prefix", ""},
        {"model_type", o->model_type},
        {"vocab_size", std::to_string(o->vocab_size)},
        {"num_threads", std::to_string(o->threads > 0 ? o->threads : 1)},
        {"character_coverage", std::to_string(o->character_coverage)},
        // the newline piece (see spm.h); unknown bytes are kept as byte pieces
        {"user_defined_symbols", "<n>"},
        {"byte_fallback", "true"},
        // indentation and runs of spaces matter in code and verse; pieces of
        // spaces alone let an indent be one token rather than one per space
        {"remove_extra_whitespaces", "false"},
        {"allow_whitespace_only_pieces", "true"},
        {"split_digits", "true"},
        {"shuffle_input_sentence", "true"},
        {"hard_vocab_limit", "true"},
    };
    if (o->max_sentences > 0)
        kw["input_sentence_size"] = std::to_string(o->max_sentences);
    std::string proto;
    // SentencePiece logs every training phase on stderr: hidden unless asked
    int saved = -1;
    if (!o->verbose) {
        std::fflush(stderr);
        saved = dup(2);
        int dn = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (dn >= 0) {
            dup2(dn, 2);
            close(dn);
        }
    }
    sentencepiece::util::Status st;
    try {
        CbIterator it(o->next, o->user);
        st = sentencepiece::SentencePieceTrainer::Train(kw, &it, &proto);
    } catch (const std::exception &ex) {
        st = sentencepiece::util::Status(sentencepiece::util::StatusCode::kInternal, ex.what());
    }
    if (saved >= 0) {
        std::fflush(stderr);
        dup2(saved, 2);
        close(saved);
    }
    if (!st.ok()) {
        set_err(err, errlen, st.ToString());
        return -1;
    }
    char *buf = static_cast<char *>(std::malloc(proto.size() ? proto.size() : 1));
    if (!buf) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    std::memcpy(buf, proto.data(), proto.size());
    *model = buf;
    *model_len = proto.size();
    return 0;
}

namespace {

bool is_json(const void *buf, size_t len)
{
    const char *c = static_cast<const char *>(buf);
    size_t i = 0;
    while (i < len && (c[i] == ' ' || c[i] == '\n' || c[i] == '\t' || c[i] == '\r'))
        i++;
    return i < len && c[i] == '{';
}

// BOS / EOS of a byte-level BPE by the names its families use; GPT-2 and
// Qwen2 have only <|endoftext|>, which then separates documents.
int load_bpe(const void *buf, size_t len, wd_spm **out, char *err, size_t errlen)
{
    wd_spm *s = new (std::nothrow) wd_spm;
    if (!s) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    if (wd_bpe_load_bytes(buf, len, &s->bpe, err, errlen)) {
        delete s;
        return -1;
    }
    for (const char *b : {"<|begin_of_text|>", "<s>", "<|endoftext|>"})
        if (s->bos < 0)
            s->bos = wd_bpe_token_id(s->bpe, b);
    for (const char *e : {"<|end_of_text|>", "</s>", "<|endoftext|>"})
        if (s->eos < 0)
            s->eos = wd_bpe_token_id(s->bpe, e);
    *out = s;
    return 0;
}

} // namespace

extern "C" int wd_spm_load_bytes(const void *buf, size_t len, wd_spm **out, char *err,
                                 size_t errlen)
{
    *out = nullptr;
    if (is_json(buf, len))
        return load_bpe(buf, len, out, err, errlen);
    wd_spm *s = new (std::nothrow) wd_spm;
    if (!s) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    auto st = s->sp.LoadFromSerializedProto(
        absl::string_view(static_cast<const char *>(buf), len));
    if (!st.ok()) {
        set_err(err, errlen, st.ToString());
        delete s;
        return -1;
    }
    return finish_load(s, out);
}

extern "C" void wd_spm_free(wd_spm *s)
{
    delete s;
}

extern "C" int wd_spm_vocab(const wd_spm *s)
{
    if (s->bpe)
        return wd_bpe_vocab(s->bpe);
    return s->sp.GetPieceSize();
}

extern "C" int wd_spm_bos(const wd_spm *s)
{
    if (s->bpe)
        return s->bos;
    return s->sp.bos_id();
}

extern "C" int wd_spm_eos(const wd_spm *s)
{
    if (s->bpe)
        return s->eos;
    return s->sp.eos_id();
}

extern "C" int wd_spm_newline(const wd_spm *s)
{
    return s->nl;
}

extern "C" int wd_spm_encode_line(const wd_spm *s, const char *text, size_t len, int32_t **ids,
                                  size_t *n, size_t *cap, char *err, size_t errlen)
{
    if (s->bpe) // newlines are ordinary bytes to it: whole documents come here
        return wd_bpe_encode(s->bpe, text, len, ids, n, cap, err, errlen);
    std::vector<int> v;
    auto st = s->sp.Encode(absl::string_view(text, len), &v);
    if (!st.ok()) {
        set_err(err, errlen, st.ToString());
        return -1;
    }
    if (*n + v.size() > *cap) {
        size_t nc = (*cap ? *cap : 1024);
        while (nc < *n + v.size())
            nc *= 2;
        int32_t *p = static_cast<int32_t *>(std::realloc(*ids, nc * sizeof(int32_t)));
        if (!p) {
            set_err(err, errlen, "out of memory");
            return -1;
        }
        *ids = p;
        *cap = nc;
    }
    for (size_t i = 0; i < v.size(); i++)
        (*ids)[*n + i] = v[i];
    *n += v.size();
    return 0;
}

extern "C" int wd_spm_decode(const wd_spm *s, const int32_t *ids, size_t n, char **out, char *err,
                             size_t errlen)
{
    *out = nullptr;
    if (s->bpe) { // BOS / EOS dropped, as for SentencePiece
        std::vector<int32_t> keep;
        for (size_t i = 0; i < n; i++)
            if (ids[i] != s->bos && ids[i] != s->eos)
                keep.push_back(ids[i]);
        size_t len;
        return wd_bpe_decode(s->bpe, keep.data(), keep.size(), out, &len, err, errlen);
    }
    std::string text;
    std::vector<int> seg;
    const int V = s->sp.GetPieceSize();
    auto flush = [&]() -> bool {
        if (seg.empty())
            return true;
        std::string piece;
        auto st = s->sp.Decode(seg, &piece);
        if (!st.ok()) {
            set_err(err, errlen, st.ToString());
            return false;
        }
        text += piece;
        seg.clear();
        return true;
    };
    for (size_t i = 0; i < n; i++) {
        int id = ids[i];
        if (id < 0 || id >= V) {
            set_err(err, errlen, "token id " + std::to_string(id) + " outside the vocabulary (" +
                                     std::to_string(V) + ")");
            return -1;
        }
        if (id == s->nl) {
            if (!flush())
                return -1;
            text += '\n';
        } else if (id == s->sp.bos_id() || id == s->sp.eos_id()) {
            if (!flush())
                return -1;
        } else {
            seg.push_back(id);
        }
    }
    if (!flush())
        return -1;
    char *buf = static_cast<char *>(std::malloc(text.size() + 1));
    if (!buf) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    std::memcpy(buf, text.c_str(), text.size() + 1);
    *out = buf;
    return 0;
}

extern "C" int wd_spm_piece_id(const wd_spm *s, const char *piece)
{
    if (s->bpe)
        return wd_bpe_added_id(s->bpe, piece);
    int id = s->sp.PieceToId(piece);
    if (id < 0 || (s->sp.IsUnknown(id) && s->sp.IdToPiece(id) != piece))
        return -1;
    return id;
}

extern "C" int wd_spm_token_bytes(const wd_spm *s, int32_t id, char *buf, size_t cap)
{
    if (s->bpe) {
        char *o = nullptr, e[8];
        size_t len = 0;
        if (wd_bpe_decode(s->bpe, &id, 1, &o, &len, e, sizeof e) || len > cap) {
            std::free(o);
            return -1;
        }
        std::memcpy(buf, o, len);
        std::free(o);
        return (int)len;
    }
    if (id < 0 || id >= s->sp.GetPieceSize())
        return -1;
    if (id == s->nl) {
        if (cap < 1)
            return -1;
        buf[0] = '\n';
        return 1;
    }
    if (s->sp.IsUnknown(id) || s->sp.IsControl(id) || s->sp.IsUnused(id))
        return -1;
    const std::string &p = s->sp.IdToPiece(id);
    unsigned v;
    if (s->sp.IsByte(id) && std::sscanf(p.c_str(), "<0x%02X>", &v) == 1) {
        if (cap < 1)
            return -1;
        buf[0] = (char)v;
        return 1;
    }
    size_t k = 0;
    for (size_t i = 0; i < p.size();) {
        if (p.compare(i, 3, "\xe2\x96\x81") == 0) { // U+2581, the space mark
            if (k >= cap)
                return -1;
            buf[k++] = ' ';
            i += 3;
        } else {
            if (k >= cap)
                return -1;
            buf[k++] = p[i++];
        }
    }
    return (int)k;
}

extern "C" const char *wd_spm_version(void)
{
    return WHALE_SPM_VERSION;
}
