"""Model zoo for rv19d: name -> builder() returning (model, kwargs, loss_of)."""
import sys
try:
    import torchvision  # noqa
except Exception:
    for _n in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[_n]
    sys.modules["torchvision"] = None
import torch
import transformers as T

V = 97
LM = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
          max_position_embeddings=64)
KV = dict(LM, num_key_value_heads=2)
TOK = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)


def ids(b=2, s=16, seed=3):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, V, (b, s), generator=g)


def lm(cfg, cls, **kw):
    def build():
        torch.manual_seed(0)
        m = cls(cfg)
        x = ids()
        return m, dict(input_ids=x, labels=x, **kw), lambda o: o.loss
    return build


def img(cfg, cls, side=32, labels=5, ch=3):
    def build():
        torch.manual_seed(0)
        m = cls(cfg)
        g = torch.Generator().manual_seed(4)
        return m, dict(pixel_values=torch.randn(2, ch, side, side, generator=g),
                       labels=torch.randint(0, labels, (2,), generator=g)), lambda o: o.loss
    return build


def encdec(cfg, cls):
    def build():
        torch.manual_seed(0)
        m = cls(cfg)
        x = ids()
        y = ids(2, 8, seed=5)
        return m, dict(input_ids=x, labels=y), lambda o: o.loss
    return build


ED = dict(vocab_size=V, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
          decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
          decoder_start_token_id=2, **TOK)


def clip():
    torch.manual_seed(0)
    cfg = T.CLIPConfig(text_config=dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, max_position_embeddings=32),
                       vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, image_size=16, patch_size=4),
                       projection_dim=16)
    m = T.CLIPModel(cfg)
    g = torch.Generator().manual_seed(4)
    return m, dict(input_ids=ids(2, 8), pixel_values=torch.randn(2, 3, 16, 16, generator=g), return_loss=True), \
        lambda o: o.loss


def siglip():
    torch.manual_seed(0)
    cfg = T.SiglipConfig(text_config=dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, max_position_embeddings=32),
                         vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, image_size=16, patch_size=4))
    m = T.SiglipModel(cfg)
    g = torch.Generator().manual_seed(4)
    return m, dict(input_ids=ids(2, 8), pixel_values=torch.randn(2, 3, 16, 16, generator=g), return_loss=True), \
        lambda o: o.loss


def clip_vision():
    torch.manual_seed(0)
    m = T.CLIPVisionModel(T.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                             num_attention_heads=4, image_size=16, patch_size=4))
    g = torch.Generator().manual_seed(4)
    return m, dict(pixel_values=torch.randn(2, 3, 16, 16, generator=g)), lambda o: (o.pooler_output * torch.linspace(-1, 1, 32)).sum()


def wav2vec2(cls=T.Wav2Vec2ForCTC, cfgcls=T.Wav2Vec2Config):
    def build():
        torch.manual_seed(0)
        cfg = cfgcls(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                     conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                     num_conv_pos_embedding_groups=4, pad_token_id=0, mask_time_prob=0.0, ctc_zero_infinity=True,
                     layerdrop=0.0)
        m = cls(cfg)
        g = torch.Generator().manual_seed(3)
        return m, dict(input_values=torch.randn(2, 800, generator=g),
                       labels=torch.randint(3, 64, (2, 6), generator=g)), lambda o: o.loss
    return build


def s2t():
    torch.manual_seed(0)
    cfg = T.Speech2TextConfig(vocab_size=V, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                              decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                              max_source_positions=64, max_target_positions=64, input_feat_per_channel=16,
                              conv_channels=32, num_conv_layers=2, decoder_start_token_id=2, **TOK)
    m = T.Speech2TextForConditionalGeneration(cfg)
    g = torch.Generator().manual_seed(3)
    return m, dict(input_features=torch.randn(2, 40, 16, generator=g), labels=ids(2, 8, seed=5)), lambda o: o.loss


def segformer():
    torch.manual_seed(0)
    cfg = T.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
                            patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
                            decoder_hidden_size=32, num_labels=4)
    m = T.SegformerForSemanticSegmentation(cfg)
    g = torch.Generator().manual_seed(4)
    return m, dict(pixel_values=torch.randn(2, 3, 32, 32, generator=g),
                   labels=torch.randint(0, 4, (2, 32, 32), generator=g)), lambda o: o.loss


MODELS = {
    "qwen3": lm(T.Qwen3Config(**KV, head_dim=8), T.Qwen3ForCausalLM),
    "qwen3_moe": lm(T.Qwen3MoeConfig(**KV, head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                     output_router_logits=True), T.Qwen3MoeForCausalLM),
    "qwen2_moe": lm(T.Qwen2MoeConfig(**KV, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                     shared_expert_intermediate_size=32), T.Qwen2MoeForCausalLM),
    "phi3": lm(T.Phi3Config(**KV, pad_token_id=0), T.Phi3ForCausalLM),
    "gemma3": lm(T.Gemma3TextConfig(**KV, head_dim=8, sliding_window=8), T.Gemma3ForCausalLM),
    "cohere": lm(T.CohereConfig(**KV), T.CohereForCausalLM),
    "stablelm": lm(T.StableLmConfig(**KV), T.StableLmForCausalLM),
    "starcoder2": lm(T.Starcoder2Config(**KV), T.Starcoder2ForCausalLM),
    "olmo2": lm(T.Olmo2Config(**KV), T.Olmo2ForCausalLM),
    "granite": lm(T.GraniteConfig(**KV), T.GraniteForCausalLM),
    "mpt": lm(T.MptConfig(d_model=32, n_heads=4, n_layers=2, vocab_size=V, max_seq_len=64), T.MptForCausalLM),
    "gptj": lm(T.GPTJConfig(vocab_size=V, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=64),
               T.GPTJForCausalLM),
    "codegen": lm(T.CodeGenConfig(vocab_size=V, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=64,
                                  n_ctx=64), T.CodeGenForCausalLM),
    "modernbert": lm(T.ModernBertConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, max_position_embeddings=64, global_attn_every_n_layers=2,
                                        local_attention=8, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                        cls_token_id=1, sep_token_id=2), T.ModernBertForMaskedLM),
    "electra": lm(T.ElectraConfig(vocab_size=V, embedding_size=16, hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64),
                  T.ElectraForMaskedLM),
    "albert": lm(T.AlbertConfig(vocab_size=V, embedding_size=16, hidden_size=32, intermediate_size=64,
                                num_hidden_layers=3, num_attention_heads=4, max_position_embeddings=64),
                 T.AlbertForMaskedLM),
    "distilbert": lm(T.DistilBertConfig(vocab_size=V, dim=32, hidden_dim=64, n_layers=2, n_heads=4,
                                        max_position_embeddings=64), T.DistilBertForMaskedLM),
    "mobilebert": lm(T.MobileBertConfig(vocab_size=V, hidden_size=32, embedding_size=16, intermediate_size=32,
                                        intra_bottleneck_size=16, num_hidden_layers=2, num_attention_heads=4,
                                        true_hidden_size=16, num_feedforward_networks=2, max_position_embeddings=64),
                     T.MobileBertForMaskedLM),
    "convbert": lm(T.ConvBertConfig(vocab_size=V, embedding_size=32, hidden_size=32, intermediate_size=64,
                                    num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64),
                   T.ConvBertForMaskedLM),
    "funnel": lm(T.FunnelConfig(vocab_size=V, block_sizes=[1, 1], d_model=32, n_head=4, d_head=8, d_inner=64),
                 T.FunnelForMaskedLM),
    "bigbird": lm(T.BigBirdConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, max_position_embeddings=64, attention_type="original_full"),
                  T.BigBirdForMaskedLM),
    "longformer": lm(T.LongformerConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, max_position_embeddings=80, attention_window=[8, 8],
                                        pad_token_id=1), T.LongformerForMaskedLM),
    "led": encdec(T.LEDConfig(**{k: v for k, v in ED.items() if k != "max_position_embeddings"},
                              max_encoder_position_embeddings=64, max_decoder_position_embeddings=64,
                              attention_window=[8, 8]), T.LEDForConditionalGeneration),
    "mbart": encdec(T.MBartConfig(**ED), T.MBartForConditionalGeneration),
    "blenderbot": encdec(T.BlenderbotConfig(**ED), T.BlenderbotForConditionalGeneration),
    "prophetnet": encdec(T.ProphetNetConfig(vocab_size=V, hidden_size=32, encoder_ffn_dim=64, decoder_ffn_dim=64,
                                            num_encoder_layers=2, num_decoder_layers=2, num_encoder_attention_heads=4,
                                            num_decoder_attention_heads=4, max_position_embeddings=64, ngram=2,
                                            num_buckets=8, relative_max_distance=16, decoder_start_token_id=2, **TOK),
                         T.ProphetNetForConditionalGeneration),
    "dinov2": img(T.Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2,
                                 image_size=16, patch_size=4, num_labels=5), T.Dinov2ForImageClassification, side=16),
    "deit": img(T.DeiTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                             image_size=16, patch_size=4, num_labels=5), T.DeiTForImageClassification, side=16),
    "beit": img(T.BeitConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                             image_size=16, patch_size=4, num_labels=5, use_relative_position_bias=True),
                T.BeitForImageClassification, side=16),
    "convnextv2": img(T.ConvNextV2Config(num_stages=2, hidden_sizes=[16, 32], depths=[1, 2], num_labels=5, drop_path_rate=0.1),
                      T.ConvNextV2ForImageClassification),
    "resnet": img(T.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic",
                                 num_labels=5), T.ResNetForImageClassification),
    "segformer": segformer,
    "clip": clip,
    "clip_vision": clip_vision,
    "siglip": siglip,
    "wav2vec2": wav2vec2(),
    "hubert": wav2vec2(T.HubertForCTC, T.HubertConfig),
    "speech2text": s2t,
}


def padded(base):
    """``base``'s token model with a padded attention mask (row 1: the last 5 tokens padding, labels -100 there)."""
    def build():
        m, kw, lf = MODELS[base]()
        x = kw["input_ids"]
        mask = torch.ones_like(x)
        mask[1, -5:] = 0
        labels = kw["labels"].clone()
        if labels.shape == x.shape:
            labels[1, -5:] = -100
        return m, dict(kw, attention_mask=mask, labels=labels), lf
    return build


for _b in ("qwen3", "gemma3", "modernbert", "electra", "mbart", "distilbert", "qwen3_moe"):
    MODELS[_b + "_pad"] = padded(_b)

MODELS.update({
    "olmoe": lm(T.OlmoeConfig(**KV, num_experts=4, num_experts_per_tok=2, output_router_logits=True), T.OlmoeForCausalLM),
    "gpt_bigcode": lm(T.GPTBigCodeConfig(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=64, multi_query=True),
                      T.GPTBigCodeForCausalLM),
    "nemotron": lm(T.NemotronConfig(**KV, head_dim=8), T.NemotronForCausalLM),
    "jamba": lm(T.JambaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, num_experts=2, num_experts_per_tok=1,
                              attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1,
                              mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=4,
                              use_mamba_kernels=False), T.JambaForCausalLM),
    "xglm": lm(T.XGLMConfig(vocab_size=V, d_model=32, ffn_dim=64, num_layers=2, attention_heads=4,
                            max_position_embeddings=64), T.XGLMForCausalLM),
})
