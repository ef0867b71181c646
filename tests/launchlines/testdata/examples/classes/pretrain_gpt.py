"""Stand-in for Megatron-LM's examples/classes/pretrain_gpt.py."""
import standin

if __name__ == "__main__":
    standin.run("examples/classes/pretrain_gpt.py")
