/* whale-data's chat templates (runtime/tools/data/chat_template.c) without
 * a tokenizer: what each renders (text, special tokens, target flags),
 * Llama 3's trim, Llama 2's system block, and which tokenizer_config.json
 * templates `auto` recognises or refuses (the comparison with transformers
 * is data-instruct-vs-hf; this one also runs under the sanitizers). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../../runtime/tools/data/chat_template.h"

/* segments as text: specials in [], targets in {} */
static char *show(const struct wd_tmpl *t, const struct wd_msg *m, int n)
{
    struct wd_seg *s;
    int ns;
    char *owned, err[256], *out = NULL;
    size_t len = 0;
    assert_int_equal(wd_tmpl_render(t, m, n, &s, &ns, &owned, err, sizeof err), 0);
    FILE *f = open_memstream(&out, &len);
    for (int i = 0; i < ns; i++) {
        bool sp = s[i].kind != WD_SEG_TEXT;
        fprintf(f, "%s%s%.*s%s%s", s[i].target ? "{" : "", sp ? "[" : "", (int)s[i].len,
                s[i].text, sp ? "]" : "", s[i].target ? "}" : "");
    }
    fclose(f);
    free(s);
    free(owned);
    return out;
}

static const struct wd_msg CONV[] = {
    { WD_SYSTEM, "Be brief.", 9 },
    { WD_USER, " Hi ", 4 },
    { WD_ASSISTANT, "\n Hello \xe3\x80\x80", 11 }, /* ends in U+3000, which trim removes */
};

static void renders(void **st)
{
    (void)st;
    struct wd_tmpl t;
    char err[256], *s;
    assert_int_equal(wd_tmpl_named("qwen2", &t, err, sizeof err), 0);
    s = show(&t, CONV + 1, 2); /* no system turn: Qwen2's default */
    assert_string_equal(s, "[<|im_start|>]system\nYou are a helpful assistant.[<|im_end|>]\n"
                           "[<|im_start|>]user\n Hi [<|im_end|>]\n"
                           "[<|im_start|>]assistant\n{\n Hello \xe3\x80\x80}{[<|im_end|>]}\n");
    free(s);
    wd_tmpl_free(&t);
    assert_int_equal(wd_tmpl_named("llama3", &t, err, sizeof err), 0);
    s = show(&t, CONV, 3);
    assert_string_equal(s, "[<|begin_of_text|>][<|start_header_id|>]system[<|end_header_id|>]\n\n"
                           "Be brief.[<|eot_id|>][<|start_header_id|>]user[<|end_header_id|>]\n\n"
                           "Hi[<|eot_id|>][<|start_header_id|>]assistant[<|end_header_id|>]\n\n"
                           "{Hello}{[<|eot_id|>]}");
    free(s);
    wd_tmpl_free(&t);
    assert_int_equal(wd_tmpl_named("llama2", &t, err, sizeof err), 0);
    s = show(&t, CONV, 3);
    assert_string_equal(s, "[<s>][[INST]] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi [[/INST]] "
                           "{Hello}{ }{[</s>]}");
    free(s);
    wd_tmpl_free(&t);
    assert_int_equal(wd_tmpl_named("mistral", &t, err, sizeof err), 0);
    s = show(&t, CONV + 1, 2);
    assert_string_equal(s, "[<s>][[INST]]  Hi  [[/INST]]{\n Hello \xe3\x80\x80}{[</s>]}");
    free(s);
    struct wd_seg *seg;
    int ns;
    char *owned;
    assert_int_equal(wd_tmpl_render(&t, CONV, 3, &seg, &ns, &owned, err, sizeof err), -1);
    assert_non_null(strstr(err, "no system role"));
    wd_tmpl_free(&t);
    assert_int_equal(wd_tmpl_named("vicuna", &t, err, sizeof err), -1);
    assert_non_null(strstr(err, "chatml, qwen2, llama3, llama2, mistral"));
}

static int auto_of(const char *tmpl, struct wd_tmpl *t, char *err, size_t errlen)
{
    char path[] = "/tmp/whale-tmpl-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "{\"chat_template\": \"%s\", \"bos_token\": {\"content\": \"<B>\"}, "
               "\"eos_token\": \"<E>\"}", tmpl);
    fclose(f);
    int rc = wd_tmpl_auto(path, t, err, errlen);
    if (rc)
        assert_non_null(strstr(err, path)); /* the file is named */
    unlink(path);
    return rc;
}

static void recognises(void **st)
{
    (void)st;
    struct wd_tmpl t;
    char err[1024];
    /* Qwen2.5's spelling: message.role, double quotes, white space, its own default */
    assert_int_equal(auto_of("{%- if messages[0].role != 'system' %}{{- '<|im_start|>system\\\\n"
                             "You are Qwen.<|im_end|>\\\\n' }}{%- endif %}{%- for message in "
                             "messages %}{{- \\\"<|im_start|>\\\" + message.role + '\\\\n' + "
                             "message.content + '<|im_end|>' + '\\\\n' }}{%- endfor %}",
                             &t, err, sizeof err), 0);
    assert_string_equal(t.name, "qwen2");
    assert_string_equal(t.default_system, "You are Qwen.");
    wd_tmpl_free(&t);
    /* plain ChatML: no default system turn */
    assert_int_equal(auto_of("{% for message in messages %}{{'<|im_start|>' + message['role'] + "
                             "'\\\\n' + message['content'] + '<|im_end|>' + '\\\\n'}}{% endfor %}",
                             &t, err, sizeof err), 0);
    assert_string_equal(t.name, "chatml");
    assert_null(t.default_system);
    wd_tmpl_free(&t);
    /* Llama 3 with the file's bos_token (an AddedToken object) */
    assert_int_equal(auto_of("{% for message in messages %}{% set content = '<|start_header_id|>' "
                             "+ message['role'] + '<|end_header_id|>\\\\n\\\\n'+ message['content'] "
                             "| trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = "
                             "bos_token + content %}{% endif %}{{ content }}{% endfor %}",
                             &t, err, sizeof err), 0);
    assert_string_equal(t.name, "llama3");
    assert_string_equal(t.bos, "<B>");
    wd_tmpl_free(&t);
    /* refused: Llama 3.1, Mistral v0.2's spacing, a template with no known marker */
    assert_int_equal(auto_of("Cutting Knowledge Date: {{ '<|start_header_id|>' }}", &t, err,
                             sizeof err), -1);
    assert_non_null(strstr(err, "Llama 3.1"));
    assert_non_null(strstr(err, "--chat-template"));
    assert_int_equal(auto_of("{{ bos_token }}{% for message in messages %}{{ ' [INST] ' + "
                             "message['content'] + ' [/INST]' }}{{ message['content'] + "
                             "eos_token}}{% endfor %}", &t, err, sizeof err), -1);
    assert_non_null(strstr(err, "[INST]"));
    assert_int_equal(auto_of("{{ messages }}", &t, err, sizeof err), -1);
    assert_non_null(strstr(err, "none of the markers"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(renders),
        cmocka_unit_test(recognises),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
