from controller.main import main

main()
