/* The architectures the native forward runs (recipe.h says how to add one). */
#include <string.h>

#include "recipe.h"

extern const llk_recipe recipe_llama, recipe_qwen2, recipe_qwen3, recipe_gemma3, recipe_phi3, recipe_qwen3moe,
    recipe_gptoss, recipe_gemma4, recipe_qwen35, recipe_qwen35moe;

static const llk_recipe *const recipes[] = {
    &recipe_llama, &recipe_qwen2, &recipe_qwen3, &recipe_gemma3, &recipe_phi3, &recipe_qwen3moe, &recipe_gptoss,
    &recipe_gemma4, &recipe_qwen35, &recipe_qwen35moe,
};
#define N_RECIPES ((int)(sizeof recipes / sizeof *recipes))

int llk_arch_id(const char *name) {
    for (int i = 0; i < N_RECIPES; i++)
        if (!strcmp(recipes[i]->name, name)) return i;
    return -1;
}

const llk_recipe *llk_recipe_of(int arch) { return arch >= 0 && arch < N_RECIPES ? recipes[arch] : NULL; }
